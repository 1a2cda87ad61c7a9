"""Which traced records become training rows: rules on kinds, tags, time, errors and scores.

Each rule has a name; ``RecordFilter.check`` returns the name of the first rule a record fails (or
None), so the conversion's card can say how many rows each rule removed, and a conversion that
keeps nothing can say which rule did it.

A score rule looks at the record's own score of that name, else at the nearest ancestor's in its
trace: a verifiable reward put on an agent run's root record filters the model calls inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from toolbox.tracing.record import ActionRecord, Score, TraceError


@dataclass
class ScoreRule:
    """``name>=0.5``, ``name<1``, ``name==true``, ``name==good`` (categorical), ``name!=bad``, ``name``
    (has the score)."""

    name: str
    op: str | None = None
    value: float | str | bool | None = None

    @classmethod
    def parse(cls, text: str) -> ScoreRule:
        for op in (">=", "<=", "==", "!=", ">", "<"):
            if op in text:
                name, raw = (s.strip() for s in text.split(op, 1))
                if not name or not raw or any(c in name + raw for c in "<>=!"):
                    break
                low = raw.lower()
                value: float | str | bool
                if low in ("true", "false"):
                    value = low == "true"
                else:
                    try:
                        value = float(raw)
                    except ValueError:
                        if op not in ("==", "!="):
                            raise TraceError(
                                f"score filter {text!r}: {op} needs a number; use == or != for a category."
                            ) from None
                        value = raw
                return cls(name, op, value)
        if text.strip() and not any(c in text for c in "<>=!"):
            return cls(text.strip())
        raise TraceError(
            f"score filter {text!r}; write NAME>=X, NAME<X, NAME==true, NAME==category, NAME!=category or NAME."
        )

    def __str__(self) -> str:
        return self.name if self.op is None else f"{self.name}{self.op}{self.value}"

    def holds(self, s: Score | None) -> bool:
        if s is None:
            return False
        if self.op is None:
            return True
        v, want = s.value, self.value
        if isinstance(want, bool):
            v = bool(v) if not isinstance(v, str) else v.lower() == "true"
        elif isinstance(want, float):
            if isinstance(v, str):
                return False
            v = float(v)
        else:
            v = str(v)
        return {
            ">=": lambda: v >= want,
            "<=": lambda: v <= want,
            ">": lambda: v > want,
            "<": lambda: v < want,
            "==": lambda: v == want,
            "!=": lambda: v != want,
        }[self.op]()


@dataclass
class RecordFilter:
    """The rules a row's record must pass (every field optional).

    Args:
        kinds: keep only these kinds (the format picks llm_call when unset).
        names: keep only records of these names.
        tags: the record must have every one of these tags.
        exclude_tags: the record must have none of these.
        since, until: start_time in [since, until).
        drop_errors: drop the rows of a trace in which any record has an error.
        scores: ScoreRules (strings like ``reward>=1`` are parsed), all must hold.
    """

    kinds: Sequence[str] | None = None
    names: Sequence[str] | None = None
    tags: Sequence[str] = ()
    exclude_tags: Sequence[str] = ()
    since: float | None = None
    until: float | None = None
    drop_errors: bool = True
    scores: Sequence[ScoreRule | str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = [s if isinstance(s, ScoreRule) else ScoreRule.parse(s) for s in self.scores]

    def rules(self) -> list[str]:
        """Every rule name, in the order they are checked."""
        names = ["kind", "name", "tags", "exclude_tags", "time", "errors"]
        return names + [f"score:{s}" for s in self.scores]

    def check(self, r: ActionRecord, trace: TraceIndex) -> str | None:
        if self.kinds is not None and r.kind not in self.kinds:
            return "kind"
        if self.names is not None and r.name not in self.names:
            return "name"
        if self.tags and not all(t in r.tags for t in self.tags):
            return "tags"
        if self.exclude_tags and any(t in r.tags for t in self.exclude_tags):
            return "exclude_tags"
        if (self.since is not None and r.start_time < self.since) or (
            self.until is not None and r.start_time >= self.until
        ):
            return "time"
        if self.drop_errors and trace.has_error:
            return "errors"
        for rule in self.scores:
            if not rule.holds(trace.score(r, rule.name)):
                return f"score:{rule}"
        return None


class TraceIndex:
    """One trace's records by id, for ancestor lookups."""

    def __init__(self, records: list[ActionRecord]) -> None:
        self.records = records
        self.by_id = {r.id: r for r in records}
        self.has_error = any(r.error for r in records)

    def score(self, r: ActionRecord, name: str) -> Score | None:
        """The record's score of this name, else its nearest ancestor's."""
        seen = 0
        node: ActionRecord | None = r
        while node is not None and seen < 1000:
            s = node.score(name)
            if s is not None:
                return s
            node = self.by_id.get(node.parent_id) if node.parent_id else None
            seen += 1
        return None
