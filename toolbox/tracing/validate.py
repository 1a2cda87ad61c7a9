"""The one check a stored record passes before any command reads it (``ls``, ``show``, ``stats``,
``export``, ``to-dataset``): every store parses its records through ``record_from_dict`` and scores
through ``score_from_dict``, so what one command accepts, every other can read.

A record that fails is skipped, never fatal: the store counts it by reason (``Skips``), warns once
per read, and ``to-dataset`` writes the counts into the dataset's ``card.json``. Reasons are short
and stable (``missing field name``, ``field start_time: not a number``, ``not JSON (a cut line)``),
so counts of one kind add up across a store.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from toolbox.tracing.record import SCHEMA_VERSION, SCORE_TYPES, ActionRecord, Score, TraceError

log = logging.getLogger(__name__)

_STR = (str,)
_OPT_STR = (str, type(None))
_REQUIRED = ("kind", "name", "id", "trace_id")
_OPTIONAL_STR = ("parent_id", "session_id", "model", "operation", "finish_reason", "error")
_MAX_TIME = 253402300799.0  # 9999-12-31: the last second a datetime can show


class MalformedRecord(TraceError):
    """A stored record or score that does not have the shape of one; ``reason`` names what is wrong."""

    def __init__(self, reason: str, where: str = "record") -> None:
        super().__init__(f"{where}: {reason}; the record is skipped")
        self.reason = reason


def _number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and -_MAX_TIME <= v <= _MAX_TIME


def _count(v: Any) -> bool:
    return v is None or (type(v) is int and v >= 0)


def check_record(d: Any) -> None:
    """Raise ``MalformedRecord`` naming the first field that is missing or of the wrong type."""
    if not isinstance(d, dict):
        raise MalformedRecord(f"not a JSON object ({type(d).__name__})")
    for key in _REQUIRED:
        v = d.get(key)
        if v is None:
            raise MalformedRecord(f"missing field {key}")
        if type(v) is not str or not v:
            raise MalformedRecord(f"field {key}: not a non-empty string")
    for key in _OPTIONAL_STR:
        if not isinstance(d.get(key), _OPT_STR):
            raise MalformedRecord(f"field {key}: not a string")
    for key in ("input_tokens", "output_tokens"):
        if not _count(d.get(key)):
            raise MalformedRecord(f"field {key}: not a count")
    if not _number(d.get("start_time", 0.0)):
        raise MalformedRecord("field start_time: not a number")
    end = d.get("end_time")
    if end is not None and not _number(end):
        raise MalformedRecord("field end_time: not a number")
    for key, kind in (("scores", list), ("tags", list), ("tools", list), ("metadata", dict)):
        v = d.get(key)
        if v is not None and not isinstance(v, kind):
            raise MalformedRecord(f"field {key}: not a {'list' if kind is list else 'JSON object'}")
    tags = d.get("tags")
    if tags and not all(type(t) is str for t in tags):
        raise MalformedRecord("field tags: not a list of strings")
    version = d.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int:
        raise MalformedRecord("field schema_version: not an integer")


def check_score(d: Any) -> None:
    """Raise ``MalformedRecord`` (reasons start with ``score``) for a score that is not one."""
    if not isinstance(d, dict):
        raise MalformedRecord("score: not a JSON object")
    if type(d.get("name")) is not str or not d["name"]:
        raise MalformedRecord("score: missing name")
    v = d.get("value")
    if not (type(v) in (str, bool) or (type(v) in (int, float) and math.isfinite(v))):
        raise MalformedRecord("score: value not a number, string or boolean")
    if d.get("data_type", "") not in ("", *SCORE_TYPES):
        raise MalformedRecord("score: unknown data_type")
    if d.get("data_type") in ("NUMERIC", "BOOLEAN") and type(v) is str:
        raise MalformedRecord("score: a numeric or boolean score with a string value")
    for key in ("source", "comment"):
        if not isinstance(d.get(key), _OPT_STR):
            raise MalformedRecord(f"score: field {key} not a string")
    if not _number(d.get("timestamp", 0.0)):
        raise MalformedRecord("score: field timestamp not a number")


def record_from_dict(d: Any, where: str = "record", skips: Skips | None = None) -> ActionRecord:
    """The record, checked (``MalformedRecord`` if it is not one). A score in it that is not one is
    dropped and counted in ``skips`` (without ``skips``: the record is malformed)."""
    check_record(d)
    scores = d.get("scores")
    if scores:
        good = []
        for s in scores:
            try:
                check_score(s)
                good.append(s)
            except MalformedRecord as e:
                if skips is None:
                    raise
                skips.score(e.reason)
        if len(good) < len(scores):
            d = {**d, "scores": good}
    return ActionRecord.from_dict(d, where=where)


def score_from_dict(d: Any) -> Score:
    check_score(d)
    return Score.from_dict(d)


class Skips:
    """What a read skipped, by reason: records and scores apart."""

    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.scores: dict[str, int] = {}

    def clear(self) -> None:
        self.records.clear()
        self.scores.clear()

    def record(self, reason: str) -> None:
        self.records[reason] = self.records.get(reason, 0) + 1

    def score(self, reason: str) -> None:
        self.scores[reason] = self.scores.get(reason, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.records.values()) + sum(self.scores.values())

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"records": dict(sorted(self.records.items())), "scores": dict(sorted(self.scores.items()))}

    def warn(self, source: Any) -> None:
        """One warning line per kind of skip (nothing when none was skipped)."""
        for what, counts in (("record", self.records), ("score", self.scores)):
            for reason, n in sorted(counts.items()):
                log.warning("%s: skipped %d %s(s): %s", source, n, what, reason)
