"""A request body's JSON, with work bounded before it is parsed (the second step of
``request.py``).

Parsing costs per value, not per byte: a 6 MB body of ``"prompt": [5, 5, ...]`` is two million
Python ints, about a second of parsing and validating that holds the interpreter's lock, while a
6 MB string is one value. So before anything is parsed, ``check_size`` counts the commas of the
raw bytes (memory speed, a few milliseconds for the largest body): a body cannot hold more values
than it has commas plus one, and a body that serves this model cannot hold more values than its
prompts' tokens (``MAX_COMPLETIONS`` prompts of the context's length) plus its characters of text
(``Limits.max_prompt_chars``) plus some slack. Anything over that is answered 413 at once.

What passes is parsed strictly in a worker thread (``request.parse_request``): orjson
where it is installed (it refuses NaN, Infinity, numbers past a double and lone UTF-16 surrogates,
and stops at 1024 levels of nesting), the ``json`` module otherwise and to word the error; nesting
deeper than ``MAX_DEPTH`` is a 400, never a ``RecursionError``.
"""

from __future__ import annotations

import json
from typing import Any

from toolbox.serving.openai.errors import APIError, bad_request

try:
    import orjson
except ImportError:  # pragma: no cover - the json module does the same, slower
    orjson = None

MAX_DEPTH = 64  # JSON nesting: a request's deepest part is a tool's or response_format's schema
SLACK_VALUES = 1 << 16  # values beyond prompts and text: fields, messages, tools, schemas


def max_values(max_model_len: int | None, char_limit: int | None, max_completions: int) -> int | None:
    """The most JSON values a body this model can serve may hold (None: no bound)."""
    if max_model_len is None:
        return None
    return max_completions * max_model_len + (char_limit or 0) + SLACK_VALUES


def check_size(raw: bytes, limit: int | None) -> None:
    """413 when ``raw`` may hold more than ``limit`` values (the bound of the module docstring)."""
    if limit is None:
        return
    commas = raw.count(b",")
    if commas >= limit:
        raise APIError(
            413,
            f"the request body holds about {commas + 1} JSON values, more than this model can use "
            f"(at most {limit}: its context's tokens for each of the prompts, and its characters of text); "
            "send a shorter prompt",
            "invalid_request_error",
            None,
            "request_too_large",
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _check_unicode(value: Any, path: str = "") -> None:
    """A lone UTF-16 surrogate (``"\\ud800"``) cannot be encoded as UTF-8, nor tokenized."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise bad_request(
                f"{path or 'the body'}: the string holds a lone UTF-16 surrogate "
                f"({value[e.start]!r} at character {e.start}); send valid Unicode",
                path or None,
            ) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_unicode(k, path)
            _check_unicode(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_unicode(v, f"{path}.{i}" if path else str(i))


def _too_deep() -> APIError:
    return bad_request(
        f"the request body is nested more than {MAX_DEPTH} levels deep; no field of this API needs that, "
        "flatten it"
    )


def _depth_ok(value: Any) -> bool:
    """Whether ``value`` nests at most ``MAX_DEPTH`` levels (iterative: no recursion to run out of)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values() if isinstance(x, dict | list))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v if isinstance(x, dict | list))
    return True


def _strict_json(raw: bytes) -> Any:
    """The ``json`` module's reading, with its errors in words of the request."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    try:
        _check_unicode(data)
    except RecursionError:
        raise _too_deep() from None
    return data


def decode_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying what is wrong with it."""
    if not raw.strip():
        raise bad_request("the request has no body; send a JSON object")
    if orjson is None:
        data = _strict_json(raw)
    else:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            if b"depth limit" in str(e).encode():
                raise _too_deep() from None
            _strict_json(raw)  # words NaN, a lone surrogate, ... as the json module reads them
            raise bad_request(f"the request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be a JSON object, not a {type(data).__name__}")
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and not _depth_ok(data):
        raise _too_deep()
    return data
