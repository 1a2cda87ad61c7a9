"""Duplicate removal for rows made from traces: exact (a hash of the row) and near (MinHash LSH).

Exact: a 16-byte BLAKE2 digest of the row's JSON, kept in a set (16 bytes per row kept,
not the row). Near: ``datasketch``'s MinHash over word 3-grams of the row's text, banded as its
``MinHashLSH`` bands them at a Jaccard threshold (its ``hashranges``); a row that shares a band with a
kept row is dropped (the first one seen is kept) — what ``bool(lsh.query(m))`` answers, but asked of
one set per band: ``query`` gathers every kept row of the matching buckets, which grows with the kept
rows when many are alike, and made the check quadratic. The permutations are drawn once, not per row.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_WORD = re.compile(r"\w+|[^\w\s]")


def row_text(row: Any) -> str:
    """Every string of a row, joined: what near-duplicate detection compares."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    walk(row)
    return "\n".join(out)


class Deduper:
    """Drop repeated rows.

    Args:
        exact: drop rows identical to a kept one.
        near: drop rows whose MinHash Jaccard estimate to a kept one is >= this (None: off).
        num_perm: MinHash permutations (more: a finer estimate, slower).
        ngram: shingle size in words.
    """

    def __init__(
        self, exact: bool = True, near: float | None = None, num_perm: int = 64, ngram: int = 3
    ) -> None:
        self.exact = exact
        self.near = near
        self.num_perm = num_perm
        self.ngram = ngram
        self._seen: set[bytes] = set()
        self._bands: list[tuple[int, int, set[bytes]]] = []
        if near is not None:
            from datasketch import MinHash, MinHashLSH

            if not 0.0 < near <= 1.0:
                from toolbox.tracing.record import TraceError

                raise TraceError(f"near-duplicate threshold {near}; choose a Jaccard similarity in (0, 1].")
            lsh = MinHashLSH(threshold=near, num_perm=num_perm)  # its banding for this threshold
            self._bands = [(start, end, set()) for start, end in lsh.hashranges]
            first = MinHash(num_perm=num_perm)
            self._permutations, self._scheme = first.permutations, first.scheme

    def _minhash(self, text: str):
        import xxhash
        from datasketch import MinHash

        words = _WORD.findall(text.lower())
        k = self.ngram
        shingles = {" ".join(words[i : i + k]).encode() for i in range(max(1, len(words) - k + 1))}
        m = MinHash(
            num_perm=self.num_perm,
            hashfunc=xxhash.xxh32_intdigest,
            permutations=self._permutations,
            scheme=self._scheme,
        )
        m.update_batch(list(shingles))
        return m

    def check(self, row: Any, line: str | None = None) -> str | None:
        """None to keep the row (and remember it), else the rule that drops it: exact_dup or near_dup.
        ``line``: the row as JSON already (rows of one format have one key order)."""
        if self.exact:
            text = line if line is not None else json.dumps(row, sort_keys=True, ensure_ascii=False)
            key = hashlib.blake2b(text.encode(), digest_size=16).digest()
            if key in self._seen:
                return "exact_dup"
        if self._bands:
            values = self._minhash(row_text(row)).hashvalues
            keys = [values[start:end].tobytes() for start, end, _ in self._bands]
            if any(k in band for k, (_, _, band) in zip(keys, self._bands, strict=True)):
                return "near_dup"
            for k, (_, _, band) in zip(keys, self._bands, strict=True):
                band.add(k)
        if self.exact:
            self._seen.add(key)
        return None
