"""JSONL trace store: one record per line, append-only; scores added later are lines of their own.

Writers append whole lines with one ``write`` on a file opened in append mode, so several processes
can append to one file. A process killed mid-line leaves a cut last line: the next writer starts
on a fresh line, and the reader skips every line that does not parse or is not a record
(``toolbox.tracing.validate``), and every score line that is not a score, counts them by reason and
warns once per read (``store.skips``). Unlike the SQLite store it has no index: a query reads the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from toolbox.core.json_codec import loads
from toolbox.tracing.record import ActionRecord, Score, TraceError, dumps
from toolbox.tracing.stores.base import Query, TraceStore
from toolbox.tracing.validate import MalformedRecord, Skips, record_from_dict, score_from_dict

log = logging.getLogger(__name__)

SCORE_PREFIX = b'{"_score":'
_TRACE_ID = re.compile(rb'"trace_id":"([^"]*)"')
BUCKET_BYTES = 32 << 20  # traces(): spill to buckets of about this size, so memory stays bounded


class JsonlStore(TraceStore):
    """Records as JSON lines in ``path``.

    Args:
        path: the ``.jsonl`` file (created on the first write).
        readonly: refuse writes.
        create: create the file if it does not exist (else a missing file is an error).
    """

    def __init__(self, path: str | Path, readonly: bool = False, create: bool = True) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.skips = Skips()
        self._file = None
        if not self.path.exists() and (readonly or not create):
            raise TraceError(f"{self.path}: no such trace store; check the path (or record traces first).")

    # writing --------------------------------------------------------------------------------------
    def _out(self):
        if self.readonly:
            raise TraceError(f"{self.path}: opened read-only; open it without readonly=True to write.")
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)  # each write one append(2)
            if self._file.tell() > 0:
                with open(self.path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":  # a line cut by a crash: start a new one
                        self._file.write(b"\n")
        return self._file

    def write(self, records: Iterable[ActionRecord], lines: list[str] | None = None) -> int:
        if lines is None:
            lines = [dumps(r) for r in records]
        if lines:
            self._out().write(("\n".join(lines) + "\n").encode())
        return len(lines)

    def add_score(self, record_id: str, score: Score) -> None:
        line = json.dumps({"_score": record_id, **score.to_dict()}, ensure_ascii=False, separators=(",", ":"))
        self._out().write(line.encode() + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # reading --------------------------------------------------------------------------------------
    def _lines(self) -> Iterator[tuple[int, bytes]]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            yield from enumerate(f, 1)

    @property
    def skipped(self) -> int:
        """Lines of records the last read skipped."""
        return sum(self.skips.records.values())

    def _scores(self) -> dict[str, list[Score]]:
        scores: dict[str, list[Score]] = {}
        for _, line in self._lines():
            if line.startswith(SCORE_PREFIX):
                try:
                    d = json.loads(line)
                except ValueError:
                    self.skips.score("not JSON (a cut line)")
                    continue
                record_id = d.pop("_score", None)
                if type(record_id) is not str:
                    self.skips.score("score: its record id is not a string")
                    continue
                try:
                    scores.setdefault(record_id, []).append(score_from_dict(d))
                except MalformedRecord as e:
                    self.skips.score(e.reason)
        return scores

    def _parse(self, i: int, line: bytes, scores: dict[str, list[Score]]) -> ActionRecord | None:
        if line.startswith(SCORE_PREFIX) or not line.strip():
            return None
        try:
            d = loads(line)
        except ValueError:
            self.skips.record("not JSON (a cut line)")
            return None
        try:
            r = record_from_dict(d, where=f"{self.path} line {i}", skips=self.skips)
        except MalformedRecord as e:
            self.skips.record(e.reason)
            return None
        extra = scores.get(r.id)
        if extra:
            r.scores.extend(extra)
        return r

    def _records(self) -> Iterator[ActionRecord]:
        self.skips.clear()
        scores = self._scores()
        good = 0
        for i, line in self._lines():
            r = self._parse(i, line, scores)
            if r is not None:
                good += 1
                yield r
        self._report(good)

    def _report(self, good: int) -> None:
        if self.skipped and not good:
            raise TraceError(
                f"{self.path}: none of its {self.skipped} lines is a trace record; it is not a JSONL "
                "trace store (or is corrupt): check the path."
            )
        self.skips.warn(self.path)

    def query(self, q: Query | None = None) -> Iterator[ActionRecord]:
        q = q or Query()
        n = 0
        for r in self._records():
            if q.matches(r):
                yield r
                n += 1
                if q.limit is not None and n >= q.limit:
                    return

    def traces(self, q: Query | None = None) -> Iterator[list[ActionRecord]]:
        """Grouped by trace with bounded memory: the lines are spilled into buckets by a hash of their
        trace id (each about BUCKET_BYTES), then each bucket is grouped in memory."""
        q = q or Query()
        size = self.path.stat().st_size if self.path.exists() else 0
        k = max(1, -(-size // BUCKET_BYTES))
        if k == 1:
            yield from _group(r for r in self._records() if q.matches(r))
            return
        self.skips.clear()
        scores = self._scores()
        good = 0
        with tempfile.TemporaryDirectory(prefix="traces-", dir=self.path.parent) as tmp:
            buckets = [open(Path(tmp) / f"{b}.jsonl", "wb") for b in range(k)]
            try:
                for _, line in self._lines():
                    if line.startswith(SCORE_PREFIX):
                        continue
                    m = _TRACE_ID.search(line)
                    key = m.group(1) if m else b""
                    b = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") % k
                    buckets[b].write(line if line.endswith(b"\n") else line + b"\n")
            finally:
                for f in buckets:
                    f.close()
            for b in range(k):
                with open(Path(tmp) / f"{b}.jsonl", "rb") as f:
                    records = []
                    for i, line in enumerate(f, 1):
                        r = self._parse(i, line, scores)
                        if r is not None:
                            good += 1
                            if q.matches(r):
                                records.append(r)
                yield from _group(records)
        self._report(good)


def _group(records: Iterable[ActionRecord]) -> Iterator[list[ActionRecord]]:
    groups: dict[str, list[ActionRecord]] = {}
    for r in records:
        groups.setdefault(r.trace_id, []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: r.start_time)
        yield g
