"""From HTTP body to a ``RequestContext``: what the engine runs and how the answer is formatted.

The order is chosen so that no request costs more than its own bounded work, and none can stall
another:

1. the body's size (``Limits.max_body_bytes``) is enforced while it is read (``BodyLimit`` in
   ``body_limit.py``, ASGI middleware: a 413);
2. the body may hold no more JSON values than the model can use (counted on the raw bytes before
   anything is parsed: a 413, ``json_body.py``); then, in a worker thread, JSON is parsed strictly:
   no NaN/Infinity, no lone UTF-16 surrogate, no nesting past ``json_body.MAX_DEPTH`` (each a 400
   that says so);
3. unknown fields are a 400 naming them (or, with ``allow_unknown_fields``, dropped); fields an
   OpenAI client may send that change nothing here (``store``, ``metadata``, ``reasoning_effort``,
   ...: ``protocol.IGNORED_FIELDS``) are accepted and named in ``RequestContext.ignored``;
4. pydantic validates the fields in strict mode (``protocol.py``: ``0`` is not a boolean,
   ``"5"`` not a number), an unknown model is a 404;
5. the prompt's length in characters is checked against ``Limits.max_prompt_chars`` before anything
   is tokenized: a text longer than the context's tokens times the longest token's characters
   cannot fit, so it is refused at once;
6. tokenization (and the chat template) runs in a worker thread, off the event loop;
7. the token counts are checked against the context.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from toolbox.data.hermes import calls as tool_calls
from toolbox.serving.engine import InferenceEngine, SamplingParams, StructuredOutput
from toolbox.serving.openai.errors import APIError, bad_request
from toolbox.serving.openai.json_body import check_size, decode_json
from toolbox.serving.openai.protocol import (
    IGNORED_FIELDS,
    ChatCompletionRequest,
    CompletionRequest,
    NamedToolChoice,
)
from toolbox.serving.structured import forced_tool_call

MAX_COMPLETIONS = 64  # prompts x n of one request
Kind = Literal["completions", "chat"]


@dataclass
class Limits:
    """What one request may cost. ``max_prompt_chars`` None: derived from the engine's context.
    ``header_timeout_s`` / ``body_timeout_s``: the time a request's headers / body may take to
    arrive (a 408 and the connection closed after it)."""

    max_body_bytes: int = 8 * 2**20
    max_prompt_chars: int | None = None
    allow_unknown_fields: bool = False
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0


@dataclass
class RequestContext:
    """One parsed request: its prompts' ids, the sampling parameters, and how to answer."""

    kind: Kind
    model: str
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool = False
    as_ids: bool = False  # return_tokens_as_token_ids
    return_token_ids: bool = False
    parse_tool_calls: bool = False  # chat with tools: cut <tool_call> blocks into tool_calls
    ignored: list[str] = field(default_factory=list)  # fields accepted and ignored (IGNORED_FIELDS)
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    t0: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.kind == "chat" else "cmpl-") + uuid.uuid4().hex

    @property
    def chat(self) -> bool:
        return self.kind == "chat"


# 3-4. fields ----------------------------------------------------------------------------------------
_TAGS = {"str", "int", "float", "bool", "dict", "list", "system", "developer", "user", "assistant", "tool"}


def _loc(err: dict[str, Any]) -> str:
    """The path through the client's JSON: pydantic also names union members, validators and the
    message kind chosen by ``role`` in a location ("str", "list[...]", "user")."""
    loc = err.get("loc", ())
    path = [
        str(x)
        for i, x in enumerate(loc)
        if isinstance(x, int)
        or not ("[" in str(x) or (x in _TAGS and (x not in ("tool",) or isinstance(loc[i - 1], int))))
    ]
    return ".".join(path)


def _drop(data: Any, loc: tuple[Any, ...]) -> None:
    for key in loc[:-1]:  # a key that is not in the data is a union tag pydantic put in the location
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
    if isinstance(data, dict):
        data.pop(loc[-1], None)


def validate(model: type[BaseModel], data: dict[str, Any], allow_unknown: bool) -> Any:
    """The validated body; a 400 naming the first bad field (unknown ones first)."""
    for _ in range(8):  # with allow_unknown: drop what is unknown, then validate again
        try:
            return model.model_validate(data, strict=True)
        except ValidationError as e:
            errors = e.errors(include_url=False)
            extra = [err for err in errors if err["type"] == "extra_forbidden"]
            if extra and allow_unknown:
                for err in extra:
                    _drop(data, tuple(err["loc"]))
                continue
            if extra:
                names = sorted({_loc(err) for err in extra})
                raise bad_request(
                    f"unknown field{'s' if len(names) > 1 else ''} {', '.join(names)}: this server does not "
                    "implement it; leave it out (or start the server with --allow-unknown-fields to have "
                    "unknown fields ignored)",
                    names[0],
                    "unknown_field",
                ) from None
            first = errors[0]
            message = "; ".join(f"{_loc(err) or 'body'}: {err['msg']}" for err in errors[:3])
            code = first["type"] if first["type"] == "invalid_combination" else None
            raise bad_request(message.replace("Value error, ", ""), _loc(first) or None, code) from None
    raise bad_request("the request has too many unknown fields")


# 5-7. prompts ----------------------------------------------------------------------------------------
def longest_token_chars(tokenizer: Any) -> int:
    """An upper bound on the characters one token decodes to (its vocabulary's longest entry)."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:
        return 64
    return max((len(str(t)) for t in vocab), default=1)


def prompt_char_limit(engine: InferenceEngine, limits: Limits) -> int | None:
    if limits.max_prompt_chars is not None:
        return limits.max_prompt_chars
    if engine.max_model_len is None:
        return None
    return engine.max_model_len * longest_token_chars(engine.tokenizer)


def _chat_input(body: ChatCompletionRequest, engine: InferenceEngine) -> tuple[list[dict[str, Any]], Any]:
    messages = []
    for m in body.messages:
        msg: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.tool_calls:
            msg["tool_calls"] = [c.model_dump() for c in m.tool_calls]
        if m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        if m.name:
            msg["name"] = m.name
        messages.append(msg)
    tools = (
        [t.model_dump(exclude_none=True) for t in body.tools]
        if body.tools and body.tool_choice != "none"
        else None
    )
    template = getattr(engine.tokenizer, "chat_template", None) or ""
    return tool_calls.template_messages(
        messages, tools, template if isinstance(template, str) else str(template)
    )


def _structured(body: Any) -> StructuredOutput | None:
    """The constraint on the output (a forced tool call, or response_format)."""
    if (
        isinstance(body, ChatCompletionRequest)
        and body.tools
        and body.tool_choice not in (None, "none", "auto")
    ):
        tools = [t.model_dump(exclude_none=True) for t in body.tools]
        name = body.tool_choice.function.name if isinstance(body.tool_choice, NamedToolChoice) else None
        return forced_tool_call(tools, name)
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(json_object=True)
    return StructuredOutput(
        json_schema=fmt.json_schema.schema_ or {}, field="response_format.json_schema.schema"
    )


def _whole(v: Any) -> Any:
    return int(v) if type(v) is float and v.is_integer() else v


def _integers(data: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema counts ``5.0`` as an integer, strict pydantic does not: whole numbers of the
    fields and their (nested) lists become ints (the int fields of this API live there)."""
    for k, v in data.items():
        if type(v) is list:
            data[k] = [[_whole(x) for x in y] if type(y) is list else _whole(y) for y in v]
        else:
            data[k] = _whole(v)
    return data


def _validated(raw: bytes, kind: Kind, allow_unknown: bool) -> Any:
    try:
        data = _integers(decode_json(raw))
        model_cls = ChatCompletionRequest if kind == "chat" else CompletionRequest
        return validate(model_cls, data, allow_unknown)
    except RecursionError:  # a validator's recursion: the body's nesting is checked before, this is a guard
        raise bad_request("the request body is nested too deeply; flatten it") from None


async def parse_request(
    raw: bytes,
    kind: Kind,
    engine: InferenceEngine,
    model_name: str,
    limits: Limits,
    char_limit: int | None,
    value_limit: int | None = None,
) -> RequestContext:
    """The request's context, or the ``APIError`` it is answered with. ``value_limit``: the most
    JSON values the body may hold (``json_body.max_values``), checked before it is parsed."""
    check_size(raw, value_limit)
    body = await asyncio.to_thread(_validated, raw, kind, limits.allow_unknown_fields)
    if body.model != model_name:
        raise APIError(
            404,
            f"the model {body.model!r} does not exist; this server serves {model_name!r}",
            "invalid_request_error",
            "model",
            "model_not_found",
        )
    param = "messages" if kind == "chat" else "prompt"
    if kind == "chat":
        chars = sum(len(m.text()) for m in body.messages)
        inputs: Any = _chat_input(body, engine)
    else:
        inputs = body.prompts()
        chars = sum(len(p) for p in inputs if isinstance(p, str))
        if len(inputs) * body.n > MAX_COMPLETIONS:
            raise bad_request(
                f"{len(inputs)} prompts x n={body.n} completions exceed {MAX_COMPLETIONS} per request",
                "n",
                "too_many_completions",
            )
        for p in inputs:
            if isinstance(p, list) and engine.max_model_len is not None and len(p) >= engine.max_model_len:
                raise _too_long(engine.max_model_len, len(p), param)
    if char_limit is not None and chars > char_limit:
        raise bad_request(
            f"the prompt has {chars} characters, more than this model's context of {engine.max_model_len} "
            f"tokens can hold (at most {char_limit} characters); shorten the prompt",
            param,
            "context_length_exceeded",
        )

    def tokenize() -> list[list[int]]:
        if kind == "chat":
            messages, tools = inputs
            return [engine.encode_chat(messages, tools)]
        return [engine.encode_prompt(p) for p in inputs]

    try:
        prompts = await asyncio.to_thread(tokenize)
    except APIError:
        raise
    except Exception as e:
        what = "render the messages with the chat template" if kind == "chat" else "tokenize the prompt"
        raise bad_request(f"could not {what}: {e}", param) from None
    ctx = _context(kind, body, model_name, prompts, engine)
    ctx.ignored = sorted(IGNORED_FIELDS & body.model_fields_set)
    return ctx


def _too_long(limit: int, n: int, param: str) -> APIError:
    return bad_request(
        f"this model's maximum context length is {limit} tokens, but the prompt has {n} tokens; "
        "shorten the prompt",
        param,
        "context_length_exceeded",
    )


def _context(
    kind: Kind, body: Any, model_name: str, prompts: list[list[int]], engine: InferenceEngine
) -> RequestContext:
    limit = engine.max_model_len
    param = "messages" if kind == "chat" else "prompt"
    if isinstance(body, ChatCompletionRequest):
        max_tokens = body.max_completion_tokens or body.max_tokens
        want_logprobs, top_logprobs = body.logprobs, body.top_logprobs or 0
    else:
        max_tokens = body.max_tokens
        want_logprobs, top_logprobs = body.logprobs is not None, body.logprobs or 0
    for ids in prompts:
        if not ids:
            raise bad_request("the prompt is empty", param)
        if limit is not None:
            if len(ids) >= limit:
                raise _too_long(limit, len(ids), param)
            if max_tokens is not None and len(ids) + max_tokens > limit:
                raise bad_request(
                    f"this model's maximum context length is {limit} tokens, but {len(ids)} prompt "
                    f"tokens + max_tokens={max_tokens} exceed it; lower max_tokens or shorten the prompt",
                    "max_tokens",
                    "context_length_exceeded",
                )
    if max_tokens is None:
        max_tokens = (limit - max(len(p) for p in prompts)) if limit is not None else 16
    params = body.sampling_params(max_tokens, want_logprobs, top_logprobs)
    vocab = getattr(engine, "vocab_size", None) or len(engine.tokenizer)
    for name, ids in (("prompt", [t for p in prompts for t in p]), ("logit_bias", list(params.logit_bias))):
        bad = sorted({t for t in ids if t >= vocab})
        if bad:
            raise bad_request(
                f"{name}: token ids {bad[:5]} are outside this model's vocabulary (ids 0..{vocab - 1})",
                name,
                "token_out_of_vocabulary",
            )
    params.structured = _structured(body)
    chat_tools = isinstance(body, ChatCompletionRequest) and bool(body.tools) and body.tool_choice != "none"
    return RequestContext(
        kind=kind,
        model=model_name,
        prompts=prompts,
        params=params,
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        as_ids=body.return_tokens_as_token_ids,
        return_token_ids=body.return_token_ids,
        parse_tool_calls=chat_tools,
    )
