"""Duplicate removal for rows made from traces: exact (a hash of the row) and near (MinHash LSH).

Exact: a 16-byte BLAKE2 digest of the row's JSON, kept in a set (16 bytes per row kept,
not the row). Near: ``datasketch``'s MinHash over word 3-grams of the row's text and its
``MinHashLSH`` index at a Jaccard threshold; a row whose estimated similarity to a kept row is at
least the threshold is dropped (the first one seen is kept).
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
        self._lsh = None
        if near is not None:
            from datasketch import MinHashLSH

            if not 0.0 < near <= 1.0:
                from toolbox.tracing.record import TraceError

                raise TraceError(f"near-duplicate threshold {near}; choose a Jaccard similarity in (0, 1].")
            self._lsh = MinHashLSH(threshold=near, num_perm=num_perm)
        self._n = 0

    def _minhash(self, text: str):
        import xxhash
        from datasketch import MinHash

        words = _WORD.findall(text.lower())
        k = self.ngram
        shingles = {" ".join(words[i : i + k]).encode() for i in range(max(1, len(words) - k + 1))}
        m = MinHash(num_perm=self.num_perm, hashfunc=xxhash.xxh32_intdigest)
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
        if self._lsh is not None:
            m = self._minhash(row_text(row))
            if self._lsh.query(m):
                return "near_dup"
            self._lsh.insert(self._n, m)
            self._n += 1
        if self.exact:
            self._seen.add(key)
        return None
