"""Metadata filters, compiled to one SQL ``WHERE`` clause over the items table.

A filter is a mapping (mem0's shape)::

    {"source": "eval"}                                   # equality
    {"step": {"gte": 100, "lt": 200}}                   # comparisons, ANDed
    {"timestamp": {"gte": "2026-01-01T00:00:00Z"}}      # a time range (ISO 8601 or epoch seconds)
    {"OR": [{"tags": {"contains": "math"}}, {"NOT": {"kind": "chat"}}]}
    {"AND": [...], "OR": [...]}                          # several keys at one level are ANDed

Operators: ``eq ne gt gte lt lte in nin contains exists``. Fields: the built-in columns (``id``,
``text``, ``timestamp``, ``importance``, ``created_at``, ``updated_at``) and every top-level
metadata key the store has seen; any other name is an error that lists them.

Semantics (exact, and identical to the brute-force reference in the tests): a comparison holds only
when the field is present and of the same kind as the value (number, string, boolean, null); a
number never equals a string. ``ne`` and ``nin`` are the negations of ``eq`` and ``in`` (so a
missing field is ``ne`` anything). ``contains`` is substring on a string field and element
equality on a list field. Strings order by code point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import toolbox.core.json_codec as json_codec
from toolbox.core.errors import ConfigError

OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists")
LOGIC = ("AND", "OR", "NOT")
#: built-in columns and their kind
BUILTIN = {
    "id": "number",
    "text": "text",
    "timestamp": "time",
    "importance": "number",
    "created_at": "time",
    "updated_at": "time",
}
_SQL_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class FilterError(ConfigError):
    """A filter names an unknown field or operator, or compares with a value of the wrong kind."""


def kind_of(value: Any) -> str:
    """The comparison kind of a JSON value: bool, number, text, null, list or other."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "list"
    return "other"


def to_epoch(value: Any, field: str) -> float:
    """A time value as epoch seconds: a number, a ``datetime`` or an ISO 8601 string (naive = UTC)."""
    if isinstance(value, bool):
        raise FilterError(f"filter on '{field}': expected a time (epoch seconds or ISO 8601), got {value!r}.")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise FilterError(
                f"filter on '{field}': {value!r} is not a time; use epoch seconds or ISO 8601 "
                "('2026-01-31' or '2026-01-31T12:00:00Z')."
            ) from None
    else:
        raise FilterError(f"filter on '{field}': expected a time (epoch seconds or ISO 8601), got {value!r}.")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def json_path(field: str) -> str:
    """The SQL literal of the JSON path of a top-level metadata key: ``'$."key"'``.

    Written into the SQL text (not bound), so an expression index on the same literal
    (``EpisodicMemory(index_fields=[...])``) can serve the filter.
    """
    if '"' in field or "\\" in field:
        raise FilterError(f"filter field {field!r}: quotes and backslashes are not allowed in a field name.")
    return "'" + f'$."{field}"'.replace("'", "''") + "'"


class _Compiler:
    def __init__(self, fields: set[str]) -> None:
        self.fields = fields
        self.params: list[Any] = []

    def node(self, spec: Any) -> str:
        if not isinstance(spec, Mapping):
            raise FilterError(f"a filter must be a mapping like {{'field': value}}, got {spec!r}.")
        if not spec:
            return "1"
        parts = []
        for key, value in spec.items():
            if key in ("AND", "OR"):
                if not isinstance(value, list | tuple) or not value:
                    raise FilterError(f"filter '{key}' takes a non-empty list of filters, got {value!r}.")
                joined = f" {key} ".join(f"({self.node(v)})" for v in value)
                parts.append(f"({joined})")
            elif key == "NOT":
                parts.append(_not(self.node(value)))
            else:
                parts.append(self.field(str(key), value))
        return " AND ".join(parts)

    def field(self, name: str, cond: Any) -> str:
        if name not in BUILTIN and name not in self.fields:
            known = sorted(BUILTIN) + sorted(self.fields - set(BUILTIN))
            raise FilterError(
                f"filter on unknown field '{name}'. Known fields: {', '.join(known)} "
                "(metadata keys become known once an item carrying them is added)."
            )
        if isinstance(cond, Mapping) and cond and all(isinstance(k, str) and k in OPERATORS for k in cond):
            ops = list(cond.items())
        elif isinstance(cond, Mapping):
            bad = [k for k in cond if k not in OPERATORS]
            raise FilterError(
                f"filter on '{name}': unknown operator {bad[0]!r} (operators: {', '.join(OPERATORS)})"
                if bad
                else f"filter on '{name}': an empty condition; give a value or {{'op': value}}."
            )
        else:
            ops = [("eq", cond)]
        return "(" + " AND ".join(self.compare(name, op, value) for op, value in ops) + ")"

    # one comparison ------------------------------------------------------------------------------
    def compare(self, name: str, op: str, value: Any) -> str:
        if op == "ne":
            return _not(self.compare(name, "eq", value))
        if op == "nin":
            return _not(self.compare(name, "in", value))
        if op == "in":
            if not isinstance(value, list | tuple):
                raise FilterError(f"filter on '{name}': 'in' takes a list, got {value!r}.")
            if not value:
                return "0"
            return "(" + " OR ".join(self.compare(name, "eq", v) for v in value) + ")"
        if name in BUILTIN:
            return self.builtin(name, op, value)
        return self.metadata(name, op, value)

    def _value(self, name: str, value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            raise FilterError(f"filter on '{name}': {value!r} is not a comparable number.")
        if kind_of(value) in ("list", "other"):
            raise FilterError(
                f"filter on '{name}': cannot compare with {value!r}; use a string, number, bool or null."
            )
        return value

    def builtin(self, name: str, op: str, value: Any) -> str:
        kind = BUILTIN[name]
        if op == "exists":
            return "1" if _truthy(value, name) else "0"
        if op == "contains":
            if kind != "text" or not isinstance(value, str):
                raise FilterError(f"filter on '{name}': 'contains' needs a text field and a string value.")
            self.params.append(value)
            return f"(instr({name}, ?) > 0)"
        if kind == "time":
            value = to_epoch(value, name)
        value = self._value(name, value)
        want = "text" if kind == "text" else "number"
        if kind_of(value) != want:
            return "0"  # a number never equals a string: no item matches
        self.params.append(value)
        return f"({name} {_SQL_OPS[op]} ?)"

    def metadata(self, name: str, op: str, value: Any) -> str:
        path = json_path(name)
        if op == "exists":
            expr = f"(json_type(metadata, {path}) IS NOT NULL)"
            return expr if _truthy(value, name) else _not(expr)
        value = self._value(name, value)
        kind = kind_of(value)
        if op == "contains":
            if kind == "null":
                raise FilterError(f"filter on '{name}': 'contains' takes a string, number or bool.")
            if kind == "bool":
                element, element_params = f"e.type = '{'true' if value else 'false'}'", []
            else:
                types = "('integer', 'real')" if kind == "number" else "('text')"
                element, element_params = f"e.type IN {types} AND e.value = ?", [value]
            in_list = (
                f"(json_type(metadata, {path}) = 'array' AND "
                f"EXISTS (SELECT 1 FROM json_each(metadata, {path}) AS e WHERE {element}))"
            )
            if kind == "text":
                self.params.extend([value, *element_params])
                return (
                    f"((json_type(metadata, {path}) = 'text' AND instr(json_extract(metadata, {path}), ?) > 0) "
                    f"OR {in_list})"
                )
            self.params.extend(element_params)
            return in_list
        if kind == "null":
            if op != "eq":
                raise FilterError(f"filter on '{name}': null can only be compared with eq/ne.")
            return f"(json_type(metadata, {path}) = 'null')"
        if kind == "bool":
            if op != "eq":
                raise FilterError(f"filter on '{name}': a boolean can only be compared with eq/ne.")
            return f"(json_type(metadata, {path}) = '{'true' if value else 'false'}')"
        types = "('integer', 'real')" if kind == "number" else "('text')"
        self.params.append(value)
        return f"(json_type(metadata, {path}) IN {types} AND json_extract(metadata, {path}) {_SQL_OPS[op]} ?)"


def _not(expr: str) -> str:
    """Negation in two-valued logic: a comparison on a missing field is NULL in SQL, and false here
    (positive terms stay bare, so an expression index can serve them)."""
    return f"(NOT COALESCE({expr}, 0))"


def _truthy(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise FilterError(f"filter on '{name}': 'exists' takes true or false, got {value!r}.")
    return value


def compile_filter(spec: Mapping[str, Any] | None, fields: set[str]) -> tuple[str, list[Any]]:
    """``(where_sql, params)`` for ``spec``; fields are the metadata keys the store knows."""
    if spec is None:
        return "1", []
    c = _Compiler(set(fields))
    sql = c.node(spec)
    return sql, c.params


def is_empty(spec: Mapping[str, Any] | None) -> bool:
    return not spec


# json.dumps with options builds an encoder per call (a third of its time for small metadata)
_METADATA_JSON = json.JSONEncoder(allow_nan=False, sort_keys=True, ensure_ascii=False)


def dumps_metadata(metadata: Mapping[str, Any] | None) -> str:
    """Metadata as JSON text; a value JSON cannot hold (NaN, a set, an object) is an error."""
    metadata = dict(metadata or {})
    bad = [k for k in metadata if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"metadata keys must be strings, got {bad[0]!r}.")
    if json_codec.scan(metadata, []):  # plain values: orjson, ~4x faster (0.25 of 100k adds' 16 s)
        text = json_codec.dumps_sorted(metadata)
        if text is not None:
            return text
    try:
        return _METADATA_JSON.encode(metadata)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"metadata must be JSON (strings, numbers, booleans, null, lists, dicts): {e}."
        ) from None
