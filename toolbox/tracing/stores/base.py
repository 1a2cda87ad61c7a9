"""The trace store interface, the query every store answers, and ``open_store`` by file suffix.

A store holds ActionRecords and their scores. ``write`` appends records (the SQLite and memory
stores keep a record id once: writing it again is a no-op; JSONL appends whatever it is given); ``add_score`` attaches a score to a stored record after the
fact; ``query`` streams the records matching a ``Query`` (SQLite and memory: by start time; JSONL:
in the order they were written);
``traces`` streams them grouped by trace (every record of a trace together, a bounded amount in
memory at a time), which is what trace → dataset conversion reads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from toolbox.tracing.record import ActionRecord, Score, TraceError
from toolbox.tracing.validate import Skips


@dataclass
class Query:
    """Which records: every set field must hold (None: any).

    Args:
        trace_id, session_id, kind, name: equal to this.
        since, until: start_time in [since, until) (seconds since the epoch).
        tag: has this tag.
        score: has a score of this name (``min_score`` / ``max_score`` bound its numeric value).
        limit: at most this many.
    """

    trace_id: str | None = None
    session_id: str | None = None
    kind: str | None = None
    name: str | None = None
    since: float | None = None
    until: float | None = None
    tag: str | None = None
    score: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    ids: list[str] | None = field(default=None, repr=False)
    limit: int | None = None

    def matches(self, r: ActionRecord) -> bool:
        if self.trace_id is not None and r.trace_id != self.trace_id:
            return False
        if self.session_id is not None and r.session_id != self.session_id:
            return False
        if self.kind is not None and r.kind != self.kind:
            return False
        if self.name is not None and r.name != self.name:
            return False
        if self.since is not None and r.start_time < self.since:
            return False
        if self.until is not None and r.start_time >= self.until:
            return False
        if self.tag is not None and self.tag not in r.tags:
            return False
        if self.ids is not None and r.id not in self.ids:
            return False
        if self.score is not None:
            s = r.score(self.score)
            if s is None:
                return False
            if self.min_score is not None or self.max_score is not None:
                if s.data_type == "CATEGORICAL":
                    return False
                v = float(s.value)
                if self.min_score is not None and v < self.min_score:
                    return False
                if self.max_score is not None and v > self.max_score:
                    return False
        return True


class TraceStore(ABC):
    """Where records live. Use as a context manager or call ``close``."""

    path: Path
    skips: Skips  # what the last read skipped, by reason (toolbox.tracing.validate)

    @abstractmethod
    def write(self, records: Iterable[ActionRecord], lines: list[str] | None = None) -> int:
        """Store the records; returns how many were written. ``lines``: the records already
        serialised (``record.dumps``), one per record, which a store that keeps JSON reuses."""

    @abstractmethod
    def add_score(self, record_id: str, score: Score) -> None:
        """Attach a score to a stored record."""

    @abstractmethod
    def query(self, q: Query | None = None) -> Iterator[ActionRecord]:
        """The matching records (by start time; JSONL: in file order)."""

    def count(self, q: Query | None = None) -> int:
        return sum(1 for _ in self.query(q))

    def get(self, record_id: str) -> ActionRecord | None:
        return next(iter(self.query(Query(ids=[record_id]))), None)

    @abstractmethod
    def traces(self, q: Query | None = None) -> Iterator[list[ActionRecord]]:
        """The matching records grouped by trace (each list one trace, by start time)."""

    def delete_traces(self, trace_ids: Iterable[str]) -> int:
        """Remove every record (and score, tag) of these traces; returns how many records went (a
        resumed trainer forgets the rounds after its checkpoint, which it runs again)."""
        raise TraceError(
            f"{self.path}: a {type(self).__name__} is append-only: traces cannot be removed from it; "
            "use a .sqlite store."
        )

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryStore(TraceStore):
    """Records in a list (tests, benchmarks, a buffer before export)."""

    def __init__(self) -> None:
        self.path = Path(":memory:")
        self.skips = Skips()  # records in memory were made as records: nothing to skip
        self.records: list[ActionRecord] = []
        self._ids: set[str] = set()

    def write(self, records: Iterable[ActionRecord], lines: list[str] | None = None) -> int:
        n = 0
        for r in records:
            if r.id not in self._ids:
                self._ids.add(r.id)
                self.records.append(r)
                n += 1
        return n

    def add_score(self, record_id: str, score: Score) -> None:
        for r in self.records:
            if r.id == record_id:
                r.scores.append(score)
                return
        raise TraceError(f"add_score: no record {record_id} in the memory store.")

    def query(self, q: Query | None = None) -> Iterator[ActionRecord]:
        q = q or Query()
        n = 0
        for r in sorted(self.records, key=lambda r: r.start_time):
            if q.matches(r):
                yield r
                n += 1
                if q.limit is not None and n >= q.limit:
                    return

    def delete_traces(self, trace_ids: Iterable[str]) -> int:
        gone = set(trace_ids)
        kept = [r for r in self.records if r.trace_id not in gone]
        n = len(self.records) - len(kept)
        self.records = kept
        self._ids = {r.id for r in kept}
        return n

    def traces(self, q: Query | None = None) -> Iterator[list[ActionRecord]]:
        groups: dict[str, list[ActionRecord]] = {}
        for r in self.query(q):
            groups.setdefault(r.trace_id, []).append(r)
        yield from groups.values()
