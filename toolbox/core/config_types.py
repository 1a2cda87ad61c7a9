"""One config value checked against its field's annotation, and the annotation's name as shown.

``check_type`` validates (and gently coerces: int -> float, list -> tuple) through pydantic, with
the ranges of ``toolbox.core.bounds``; ``type_name`` is what errors and ``toolbox catalog`` show
(``int >= 1``, ``str | None``).
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from toolbox.core.errors import ConfigError


def check_type(value: Any, annotation: Any, path: str) -> Any:
    """Validate (and gently coerce: int -> float, list -> tuple) one config value."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        adapter = TypeAdapter(annotation, config={"arbitrary_types_allowed": True})
    except Exception:  # not a type pydantic understands (a protocol, a module): accept
        try:
            adapter = TypeAdapter(annotation)
        except Exception:
            return value
    try:
        return adapter.validate_python(value, strict=False)
    except ValidationError as e:
        first = e.errors()[0]
        raise ConfigError(
            f"{path}: expected {type_name(annotation)}, got {value!r} "
            f"({type(value).__name__}): {first['msg']}."
        ) from None


def type_name(annotation: Any) -> str:
    if annotation is Any:
        return "any"
    if typing.get_origin(annotation) is typing.Annotated:  # a range from toolbox.core.bounds
        base, *meta = typing.get_args(annotation)
        return f"{type_name(base)} {', '.join(_bound_text(m) for m in meta)}"
    args = typing.get_args(annotation)
    if any(typing.get_origin(a) is typing.Annotated for a in args):
        origin = typing.get_origin(annotation)
        if isinstance(origin, type) and origin is not types.UnionType:  # list[AtLeastOne]
            return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)  # AtLeastOne | None
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _bound_text(meta: Any) -> str:
    for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if hasattr(meta, attr):
            return f"{op} {getattr(meta, attr)}"
    return str(meta)
