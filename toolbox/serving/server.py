"""``toolbox serve``: an OpenAI-compatible HTTP server (FastAPI + uvicorn) in front of any engine.

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed as SSE
ending in ``data: [DONE]``; ``stream_options.include_usage``; ``n``, ``stop``, ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``logprobs``), ``GET /health`` and ``GET /metrics``
(Prometheus text). With an API key every ``/v1`` route needs ``Authorization: Bearer KEY`` (401).

Errors are OpenAI-style bodies ``{"error": {"message", "type", "param", "code"}}``: 400 for
malformed JSON, an unknown model, a prompt longer than the context or bad parameters; 401 without
the key; 429 when the engine's queue is full; 503 while shutting down; a genuine bug is a 500 with
the same body and no traceback. A client that disconnects cancels its generation; on SIGTERM or
SIGINT uvicorn stops accepting connections and the requests in flight finish before the engine
stops.

Build the app around an engine with ``build_app(engine, model_name)``; ``serve(...)`` runs it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from toolbox.serving.engine import (
    EngineClosedError,
    EngineError,
    InferenceEngine,
    PromptTooLongError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    StreamDelta,
)
from toolbox.serving.server_metrics import ServerMetrics
from toolbox.serving.server_protocol import ChatCompletionRequest, CompletionRequest

log = logging.getLogger(__name__)
MAX_COMPLETIONS = 64  # prompts x n of one request


# errors ------------------------------------------------------------------------------------------
class APIError(Exception):
    """An error answered as an OpenAI-style body."""

    def __init__(
        self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code


def error_body(message: str, type_: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, None)


def engine_error(e: BaseException) -> APIError:
    """The HTTP answer to an engine's exception."""
    if isinstance(e, QueueFullError):
        return APIError(429, str(e), "rate_limit_error", None, "queue_full")
    if isinstance(e, EngineClosedError):
        return APIError(503, str(e), "service_unavailable", None, "shutting_down")
    if isinstance(e, PromptTooLongError | ValueError):
        return bad_request(str(e), "prompt" if isinstance(e, PromptTooLongError) else None)
    if isinstance(e, EngineError):
        return APIError(500, str(e), "server_error", None, "engine_error")
    return APIError(500, "internal server error", "server_error", None, None)


# engine front: one way to submit to any engine ------------------------------------------------------
class _GenericHandle:
    """A request to an engine without ``submit`` (hf, vllm, http): its ``stream``/``generate_async``."""

    def __init__(self, front: EngineFront, ids: list[int], params: SamplingParams, stream: bool) -> None:
        self.front, self.prompt_token_ids, self.params, self.stream = front, ids, params, stream
        self._task: asyncio.Task | None = None
        self._released = False
        if not stream:
            self._task = asyncio.ensure_future(front.engine.generate_async(ids, params))
            self._task.add_done_callback(lambda _: self._release())

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self.front.in_flight -= 1

    async def wait(self) -> RequestOutput:
        assert self._task is not None
        return await self._task

    async def __aiter__(self) -> AsyncIterator[StreamDelta]:
        gen = self.front.engine.stream(self.prompt_token_ids, self.params)
        try:
            async for delta in gen:
                yield delta
        finally:
            await gen.aclose()
            self._release()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._release()


class EngineFront:
    """Submits requests: the torch engine's ``submit`` (continuous batching), else a generic handle
    with a server-side limit of ``max_queue`` requests in flight."""

    def __init__(self, engine: InferenceEngine, max_queue: int | None = None) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.native = callable(getattr(engine, "submit", None))
        self.in_flight = 0

    def submit(self, ids: list[int], params: SamplingParams, stream: bool) -> Any:
        if self.native:
            return self.engine.submit(ids, params, stream=stream)  # type: ignore[attr-defined]
        if self.max_queue is not None and self.in_flight >= self.max_queue:
            raise QueueFullError(f"{self.in_flight} requests are in flight (--max-queue {self.max_queue})")
        self.in_flight += 1
        return _GenericHandle(self, ids, params, stream)

    def stats(self) -> dict[str, int]:
        stats = dict(self.engine.stats() or {})
        if not self.native:
            stats.setdefault("running", self.in_flight)
        return stats


# the app ---------------------------------------------------------------------------------------------
class _State:
    def __init__(self, engine: InferenceEngine, model_name: str, max_queue: int | None) -> None:
        self.engine = engine
        self.front = EngineFront(engine, max_queue)
        self.model_name = model_name
        self.metrics = ServerMetrics()
        self.created = int(time.time())
        self.draining = False


def _token_text(tokenizer: Any, token_id: int, as_id: bool = False) -> str:
    """A token's name in a logprobs object: its text, or with ``as_id`` (vLLM's
    ``return_tokens_as_token_ids``) ``"token_id:{id}"``."""
    if as_id:
        return f"token_id:{token_id}"
    try:
        return tokenizer.decode([token_id])
    except Exception:
        return str(token_id)


def build_app(
    engine: InferenceEngine,
    model_name: str,
    api_key: str | None = None,
    max_queue: int | None = None,
    drain_timeout: float = 60.0,
    shutdown_engine: bool = True,
) -> FastAPI:
    """The FastAPI app serving ``engine`` under ``model_name``.

    Args:
        engine: any ``InferenceEngine``; the torch engine streams token by token with continuous
            batching, others through their ``stream``.
        model_name: the ``model`` requests must name (``/v1/models`` lists it).
        api_key: if set, ``/v1`` routes need ``Authorization: Bearer <api_key>``.
        max_queue: for engines without their own queue: most requests in flight before 429.
        drain_timeout: seconds the shutdown waits for the engine's requests to finish.
        shutdown_engine: shut the engine down when the app stops.
    """
    state = _State(engine, model_name, max_queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        state.draining = True
        drain = getattr(engine, "drain", None)
        if callable(drain):
            await asyncio.to_thread(drain, drain_timeout)
        if shutdown_engine:
            engine.shutdown()

    app = FastAPI(title="toolbox serve", version="1", lifespan=lifespan)
    app.state.toolbox = state

    # error handlers --------------------------------------------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        headers = {"Retry-After": "1"} if e.status in (429, 503) else None
        return JSONResponse(error_body(e.message, e.type, e.param, e.code), e.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return JSONResponse(
                error_body("the request body is not valid JSON", "invalid_request_error"), 400
            )
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        message = "; ".join(
            f"{'.'.join(str(x) for x in err.get('loc', ()) if x != 'body') or 'body'}: {err.get('msg')}"
            for err in errors[:5]
        )
        return JSONResponse(error_body(message, "invalid_request_error", param), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(e.detail), type_), e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> JSONResponse:
        log.error("unhandled error serving %s: %s: %s", request.url.path, type(e).__name__, e)
        return JSONResponse(error_body("internal server error", "server_error"), 500)

    # auth --------------------------------------------------------------------------------------------
    async def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(401, "invalid or missing API key", "authentication_error", None, "invalid_api_key")

    # routes ------------------------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> Response:
        if state.draining:
            return JSONResponse({"status": "draining"}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            state.metrics.render(state.front.stats()), media_type="text/plain; version=0.0.4"
        )

    @app.get("/v1/models", dependencies=[Depends(check_key)])
    async def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "created": state.created, "owned_by": "toolbox"}
        if engine.max_model_len is not None:
            card["max_model_len"] = engine.max_model_len
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions", dependencies=[Depends(check_key)])
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _serve(state, "completions", body, request)

    @app.post("/v1/chat/completions", dependencies=[Depends(check_key)])
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await _serve(state, "chat", body, request)

    return app


# request handling ------------------------------------------------------------------------------------
def _prepare(
    state: _State, kind: str, body: CompletionRequest | ChatCompletionRequest
) -> tuple[list[list[int]], SamplingParams]:
    engine = state.engine
    if body.model != state.model_name:
        raise APIError(
            400,
            f"the model {body.model!r} does not exist; this server serves {state.model_name!r}",
            "invalid_request_error",
            "model",
            "model_not_found",
        )
    try:
        if kind == "chat":
            assert isinstance(body, ChatCompletionRequest)
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            prompts = [engine.encode_chat(messages)]
        else:
            assert isinstance(body, CompletionRequest)
            prompts = [engine.encode_prompt(p) for p in body.prompts()]
    except APIError:
        raise
    except Exception as e:
        raise bad_request(f"could not tokenize the prompt: {type(e).__name__}: {e}", "prompt") from e
    if len(prompts) * body.n > MAX_COMPLETIONS:
        raise bad_request(
            f"{len(prompts)} prompts x n={body.n} completions exceed {MAX_COMPLETIONS} per request", "n"
        )
    limit = engine.max_model_len
    if isinstance(body, ChatCompletionRequest):
        max_tokens = body.max_completion_tokens or body.max_tokens
        want_logprobs, top_logprobs = body.logprobs, body.top_logprobs or 0
    else:
        max_tokens = body.max_tokens
        want_logprobs, top_logprobs = body.logprobs is not None, body.logprobs or 0
    for ids in prompts:
        if not ids:
            raise bad_request("the prompt is empty", "prompt")
        if limit is not None:
            if len(ids) >= limit:
                raise bad_request(
                    f"this model's maximum context length is {limit} tokens, but the prompt has "
                    f"{len(ids)} tokens; shorten the prompt",
                    "prompt" if kind == "completions" else "messages",
                )
            if max_tokens is not None and len(ids) + max_tokens > limit:
                raise bad_request(
                    f"this model's maximum context length is {limit} tokens, but {len(ids)} prompt "
                    f"tokens + max_tokens={max_tokens} exceed it; lower max_tokens or shorten the prompt",
                    "max_tokens",
                )
    if max_tokens is None:
        max_tokens = (limit - max(len(p) for p in prompts)) if limit is not None else 16
    params = body.sampling_params(max_tokens, want_logprobs, top_logprobs)
    return prompts, params


def _submit_all(state: _State, prompts: list[list[int]], params: SamplingParams, stream: bool) -> list[Any]:
    handles: list[Any] = []
    try:
        for ids in prompts:
            handles.append(state.front.submit(ids, params, stream))
    except Exception as e:
        for h in handles:
            h.cancel()
        raise engine_error(e) from e
    return handles


def _lp(x: float) -> float:
    """A log-prob JSON can carry: -inf (a token the processed logits ruled out) as vLLM's -9999."""
    return max(float(x), -9999.0)


def _completion_logprobs(
    tokenizer: Any,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    tops: Sequence[dict[int, float]] | None,
    offset: int,
    as_ids: bool = False,
) -> dict[str, Any]:
    """The completions API's ``logprobs`` object. ``top_logprobs[i]`` maps the text of the ``logprobs``
    most likely tokens (most likely first) and of the chosen token to their log-probs, as OpenAI and
    vLLM do (k or k + 1 entries; only the chosen token with ``logprobs: 0``). With ``as_ids`` every
    token is named ``"token_id:{id}"``, and the text offsets count those names, as vLLM's do."""
    tokens = [_token_text(tokenizer, t, as_ids) for t in token_ids]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    top_logprobs = []
    for i, (t, lp) in enumerate(zip(tokens, logprobs, strict=False)):
        entry = {_token_text(tokenizer, tid, as_ids): _lp(v) for tid, v in (tops[i] if tops else {}).items()}
        entry.setdefault(t, _lp(lp))
        top_logprobs.append(entry)
    return {
        "tokens": tokens,
        "token_logprobs": [_lp(x) for x in logprobs],
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def _chat_logprobs(
    tokenizer: Any,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    tops: Sequence[dict[int, float]] | None,
    as_ids: bool = False,
) -> dict[str, Any]:
    """The chat API's ``logprobs`` object: per token its text, log-prob and bytes, and in
    ``top_logprobs`` the ``top_logprobs`` most likely tokens of that step, most likely first. With
    ``as_ids`` every ``token`` is ``"token_id:{id}"``; as in vLLM, the bytes of a generated token stay
    those of its text, and an alternative's are those of its ``token_id:`` name."""

    def entry(token_id: int, logprob: float, text_bytes: bool) -> dict[str, Any]:
        name = _token_text(tokenizer, token_id, as_ids)
        text = _token_text(tokenizer, token_id) if text_bytes else name
        return {"token": name, "logprob": _lp(logprob), "bytes": list(text.encode())}

    content = []
    for i, (t, lp) in enumerate(zip(token_ids, logprobs, strict=False)):
        top = [entry(tid, v, False) for tid, v in (tops[i] if tops else {}).items()]
        content.append({**entry(t, lp, True), "top_logprobs": top})
    return {"content": content}


async def _serve(state: _State, kind: str, body: Any, request: Request) -> Response:
    t0 = time.perf_counter()
    endpoint = "chat" if kind == "chat" else "completions"
    try:
        if state.draining:
            raise APIError(503, "the server is shutting down", "service_unavailable", None, "shutting_down")
        prompts, params = _prepare(state, kind, body)
        handles = _submit_all(state, prompts, params, body.stream)
    except APIError as e:
        state.metrics.request_done(endpoint, e.status)
        raise
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
    if body.stream:
        return _ClosingStreamingResponse(
            _stream(state, kind, body, request, handles, prompts, params, rid, t0),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await _whole(state, kind, body, request, handles, prompts, params, rid, t0)


async def _whole(state, kind, body, request, handles, prompts, params, rid, t0) -> Response:
    endpoint = "chat" if kind == "chat" else "completions"
    state.metrics.in_flight += 1
    gathered = asyncio.ensure_future(asyncio.gather(*[h.wait() for h in handles]))
    try:
        while True:
            done, _ = await asyncio.wait({gathered}, timeout=0.5)
            if done:
                break
            if await request.is_disconnected():
                for h in handles:
                    h.cancel()
                gathered.cancel()
                state.metrics.disconnects += 1
                state.metrics.request_done(endpoint, 499)
                return Response(status_code=499)
        try:
            outputs: list[RequestOutput] = gathered.result()
        except Exception as e:
            err = engine_error(e)
            state.metrics.request_done(endpoint, err.status)
            raise err from e
    except asyncio.CancelledError:
        for h in handles:
            h.cancel()
        gathered.cancel()
        raise
    finally:
        state.metrics.in_flight -= 1
    tok = state.engine.tokenizer
    as_ids = body.return_tokens_as_token_ids
    choices, n_prompt, n_completion = [], 0, 0
    for p, out in enumerate(outputs):
        n_prompt += len(prompts[p])
        for i, c in enumerate(out.completions):
            n_completion += len(c.token_ids)
            index = p * params.n + i
            if kind == "chat":
                choice: dict[str, Any] = {
                    "index": index,
                    "message": {"role": "assistant", "content": c.text},
                    "logprobs": _chat_logprobs(tok, c.token_ids, c.logprobs or [], c.top_logprobs, as_ids)
                    if params.logprobs
                    else None,
                    "finish_reason": c.finish_reason,
                }
            else:
                choice = {
                    "index": index,
                    "text": c.text,
                    "logprobs": _completion_logprobs(
                        tok, c.token_ids, c.logprobs or [], c.top_logprobs, 0, as_ids
                    )
                    if params.logprobs
                    else None,
                    "finish_reason": c.finish_reason,
                }
                if body.return_token_ids:
                    choice["prompt_token_ids"] = prompts[p]
            if body.return_token_ids:
                choice["token_ids"] = list(c.token_ids)
            choices.append(choice)
    e2e = time.perf_counter() - t0
    state.metrics.tokens(n_prompt, n_completion)
    state.metrics.latency(None, e2e, n_completion)
    state.metrics.request_done(endpoint, 200)
    response: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": choices,
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_completion,
            "total_tokens": n_prompt + n_completion,
        },
    }
    if kind == "chat" and body.return_token_ids:
        response["prompt_token_ids"] = prompts[0]
    return JSONResponse(response)


async def _merge(handles: list[Any]) -> AsyncIterator[tuple[int, StreamDelta]]:
    """(prompt index, delta) from every handle, as they come."""
    if len(handles) == 1:
        async for delta in handles[0]:
            yield 0, delta
        return
    queue: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(p: int, handle: Any) -> None:
        try:
            async for delta in handle:
                await queue.put((p, delta))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            await queue.put((p, e))
        finally:
            await queue.put((p, end))

    tasks = [asyncio.ensure_future(pump(p, h)) for p, h in enumerate(handles)]
    try:
        left = len(tasks)
        while left:
            p, item = await queue.get()
            if item is end:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield p, item
    finally:
        for t in tasks:
            t.cancel()


class _ClosingStreamingResponse(StreamingResponse):
    """Closes its generator as soon as the response ends (a client that went away included), so the
    generation is cancelled at once rather than when the generator is garbage-collected."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _stream(state, kind, body, request, handles, prompts, params, rid, t0) -> AsyncIterator[str]:
    endpoint = "chat" if kind == "chat" else "completions"
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    created = int(time.time())
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    tok = state.engine.tokenizer
    as_ids = body.return_tokens_as_token_ids
    first: float | None = None
    n_completion = 0
    n_prompt = sum(len(p) for p in prompts)
    started: set[int] = set()
    text_offsets: dict[int, int] = {}  # completions with logprobs: the text offset of each choice
    ids_sent: set[int] = set()  # return_token_ids: the choices whose prompt ids went out
    finished = False
    status = 200
    state.metrics.in_flight += 1
    try:
        async for p, delta in _merge(handles):
            if delta.finish_reason == "abort":
                continue
            index = p * params.n + delta.index
            n_completion += len(delta.token_ids)
            if first is None and delta.token_ids:
                first = time.perf_counter() - t0
            lp = delta.logprobs if params.logprobs and delta.logprobs is not None else None
            if kind == "chat":
                d: dict[str, Any] = {"content": delta.text}
                if index not in started:
                    started.add(index)
                    d = {"role": "assistant", "content": delta.text}
                choice: dict[str, Any] = {
                    "index": index,
                    "delta": d,
                    "logprobs": _chat_logprobs(tok, delta.token_ids, lp, delta.top_logprobs, as_ids)
                    if lp is not None
                    else None,
                    "finish_reason": delta.finish_reason,
                }
            else:
                choice = {
                    "index": index,
                    "text": delta.text,
                    "logprobs": _completion_logprobs(
                        tok, delta.token_ids, lp, delta.top_logprobs, text_offsets.get(index, 0), as_ids
                    )
                    if lp is not None
                    else None,
                    "finish_reason": delta.finish_reason,
                }
            if lp is not None and kind != "chat":
                step = sum(len(_token_text(tok, t, as_ids)) for t in delta.token_ids)
                text_offsets[index] = text_offsets.get(index, 0) + step
            chunk: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": state.model_name}
            chunk["choices"] = [choice]
            if body.return_token_ids:  # vLLM's: the prompt's ids in a choice's first chunk
                choice["token_ids"] = list(delta.token_ids)
                if index not in ids_sent:
                    ids_sent.add(index)
                    (chunk if kind == "chat" else choice)["prompt_token_ids"] = prompts[p]
            if include_usage:
                chunk["usage"] = None
            yield _sse(chunk)
        if include_usage:
            yield _sse(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": state.model_name,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": n_prompt,
                        "completion_tokens": n_completion,
                        "total_tokens": n_prompt + n_completion,
                    },
                }
            )
        yield "data: [DONE]\n\n"
        finished = True
    except (asyncio.CancelledError, GeneratorExit):  # the client went away
        status = 499
        state.metrics.disconnects += 1
        raise
    except Exception as e:  # the engine failed mid-stream: tell the client in-band
        err = engine_error(e)
        status = err.status
        yield _sse(error_body(err.message, err.type, err.param, err.code))
        yield "data: [DONE]\n\n"
    finally:
        for h in handles:
            h.cancel()
        state.metrics.in_flight -= 1
        state.metrics.request_done(endpoint, status)
        if finished:
            state.metrics.tokens(n_prompt, n_completion)
            state.metrics.latency(first, time.perf_counter() - t0, n_completion)


# running it --------------------------------------------------------------------------------------------
def build_engine(
    model: str, engine: str = "torch", overrides: dict[str, Any] | None = None
) -> InferenceEngine:
    """An engine from the ``ENGINES`` registry for the model folder ``model`` (``engine.*`` overrides)."""
    from toolbox.core.registries import ENGINES

    spec: dict[str, Any] = {"name": engine, **(overrides or {})}
    if model:
        spec.setdefault("path", model)  # the http engine: its tokenizer
    return ENGINES.build(spec, path="engine")


def serve(
    engine: InferenceEngine,
    model_name: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_queue: int | None = None,
    drain_timeout: float = 60.0,
    log_level: str = "warning",
) -> None:
    """Run the server until SIGTERM/SIGINT; requests in flight finish first (up to ``drain_timeout``)."""
    import uvicorn

    app = build_app(engine, model_name, api_key=api_key, max_queue=max_queue, drain_timeout=drain_timeout)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=int(drain_timeout),
        timeout_keep_alive=30,
        backlog=2048,
        access_log=False,
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the SIGTERM/SIGINT it handled once it has shut down gracefully; catch that
    # re-raise so that a drained shutdown exits with status 0
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    else:
        server.run()
