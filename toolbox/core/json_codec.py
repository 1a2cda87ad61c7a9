"""JSON, fast: ``orjson`` when it is installed, the standard ``json`` otherwise (trace records in
``toolbox.tracing``, memory metadata in ``toolbox.memory``).

The two must store the same values and refuse the same ones, so a value on which they differ is
never given to orjson: ``scan`` accepts only exact ``str``, ``int``, finite ``float``, ``bool``,
``None``, ``list``/``tuple`` and ``dict`` with ``str`` keys (orjson writes NaN as null, serialises a
UUID, an enum, a dataclass or a datetime, and refuses a non-str key or a subclass, where json
refuses NaN and those objects and converts the keys); anything else goes to ``json``, which stores
it or raises as it always did. Only a number's spelling may differ (``1e-07`` / ``1e-7``), never the
value read back. ``scan`` also collects the strings of the fields the redactor rewrites, so the
redaction pre-check reads the text of a record and not its JSON keys.

orjson comes with DVC (``dvc-data``); without it everything works, slower.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the json module does the same work
    orjson = None

# the fields whose strings the redactor rewrites (Redactor.__call__)
TEXT_FIELDS = frozenset(("name", "error", "inputs", "outputs", "tools", "metadata"))


def scan(v: Any, texts: list[str]) -> bool:
    """Whether ``v`` holds plain JSON values only (see the module docstring); appends its strings
    (not its keys) to ``texts``."""
    t = type(v)
    if t is str:
        texts.append(v)
        return True
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                return False
            tx = type(x)
            if tx is str:
                texts.append(x)
            elif x is None or tx is int or tx is bool:
                continue
            elif tx is float:
                if x - x != 0.0:  # NaN or an infinity
                    return False
            elif not scan(x, texts):
                return False
        return True
    if t is list or t is tuple:
        for x in v:
            tx = type(x)
            if tx is str:
                texts.append(x)
            elif x is None or tx is int or tx is bool:
                continue
            elif tx is float:
                if x - x != 0.0:
                    return False
            elif not scan(x, texts):
                return False
        return True
    if v is None or t is int or t is bool:
        return True
    if t is float:
        return v - v == 0.0
    return False


def scan_record(d: dict[str, Any], texts: list[str]) -> bool:
    """``scan`` over a record's dict, collecting only the strings of ``TEXT_FIELDS``."""
    other: list[str] = []
    for k, v in d.items():
        t = type(v)
        if t is str:
            if k in TEXT_FIELDS:
                texts.append(v)
        elif v is None or t is int:
            continue
        elif t is float:
            if v - v != 0.0:
                return False
        elif not scan(v, texts if k in TEXT_FIELDS else other):
            return False
    return True


def dumps_plain(d: Any) -> str | None:
    """``d`` (already ``scan``ned plain) as compact JSON through orjson; None without orjson or when
    orjson refuses it (an int beyond 64 bits): the caller then uses ``json``."""
    if orjson is None:
        return None
    try:
        return orjson.dumps(d).decode()
    except (TypeError, ValueError):
        return None


def dumps_sorted(d: Any) -> str | None:
    """``d`` (already ``scan``ned plain) as compact JSON with sorted keys through orjson (the same
    order as ``json``'s ``sort_keys`` for str keys); None where ``dumps_plain`` gives None."""
    if orjson is None:
        return None
    try:
        return orjson.dumps(d, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, ValueError):
        return None


def dumps_json(d: Any) -> str:
    """The standard library's spelling (raises TypeError/ValueError on what JSON cannot hold)."""
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(s: str | bytes) -> Any:
    """Parse JSON; orjson first, ``json`` for what orjson refuses (NaN literals, huge ints), so a
    line that does not parse raises ValueError either way."""
    if orjson is not None:
        try:
            return orjson.loads(s)
        except ValueError:
            pass
    return json.loads(s)
