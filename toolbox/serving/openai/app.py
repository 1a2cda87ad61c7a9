"""``toolbox serve``: an OpenAI-compatible HTTP server (FastAPI + uvicorn) in front of any engine.

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed as SSE
ending in ``data: [DONE]``; ``stream_options.include_usage``; sampling, penalties, ``logit_bias``,
``logprobs``, ``response_format`` json_object / json_schema, ``tools`` / ``tool_choice``),
``GET /health`` and ``GET /metrics`` (Prometheus text). With an API key every ``/v1`` route needs
``Authorization: Bearer KEY`` (401). ``GET /openapi.json`` publishes the request schemas and every
status a route answers.

The parts: ``timeouts.py`` closes a connection whose request headers take longer than
``Limits.header_timeout_s``; ``body_limit.py`` refuses a body over the size limit, or slower
than ``Limits.body_timeout_s``, as it is read; ``request.py`` turns a body into a
``RequestContext`` (bounded JSON, parsed and validated off the event loop, field checks, prompt
bounds, tokenization in a worker thread); ``engine_front.py`` submits it to the engine;
``response.py`` formats the answer, whole or streamed; ``errors.py`` holds the error
bodies and statuses. A client that disconnects cancels its generation (one that leaves before its
body is read is one warning line); fields accepted and ignored are named in the response's
``X-Ignored-Fields`` header and a warning; on SIGTERM or SIGINT uvicorn
stops accepting connections and the requests in flight finish before the engine stops.

Build the app around an engine with ``build_app(engine, model_name)``; ``serve(...)`` runs it.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from toolbox.serving.engine import InferenceEngine, RequestOutput, StreamDelta
from toolbox.serving.openai.body_limit import BodyLimit
from toolbox.serving.openai.engine_front import EngineFront
from toolbox.serving.openai.errors import APIError, engine_error, error_body
from toolbox.serving.openai.json_body import max_values
from toolbox.serving.openai.metrics import ServerMetrics
from toolbox.serving.openai.openapi import openapi_document
from toolbox.serving.openai.request import (
    MAX_COMPLETIONS,
    Kind,
    Limits,
    RequestContext,
    parse_request,
    prompt_char_limit,
)
from toolbox.serving.openai.response import ResponseFormatter, sse

log = logging.getLogger(__name__)


class _State:
    def __init__(
        self, engine: InferenceEngine, model_name: str, max_queue: int | None, limits: Limits
    ) -> None:
        self.engine = engine
        self.front = EngineFront(engine, max_queue)
        self.model_name = model_name
        self.limits = limits
        self.char_limit = prompt_char_limit(engine, limits)
        self.value_limit = max_values(engine.max_model_len, self.char_limit, MAX_COMPLETIONS)
        self.metrics = ServerMetrics()
        self.created = int(time.time())
        self.draining = False


def build_app(
    engine: InferenceEngine,
    model_name: str,
    api_key: str | None = None,
    max_queue: int | None = None,
    drain_timeout: float = 60.0,
    shutdown_engine: bool = True,
    limits: Limits | None = None,
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
        limits: body size, prompt characters, unknown fields (``request.Limits``).
    """
    limits = limits or Limits()
    state = _State(engine, model_name, max_queue, limits)

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

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        headers = {"Retry-After": "1"} if e.status in (429, 503) else None
        if e.status in (408, 413):  # the rest of the body is not read: the connection cannot go on
            headers = {"Connection": "close"}
        return JSONResponse(e.body(), e.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(e.detail), type_), e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> JSONResponse:
        log.error("unhandled error serving %s: %s: %s", request.url.path, type(e).__name__, e)
        return JSONResponse(error_body("internal server error", "server_error"), 500)

    async def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(401, "invalid or missing API key", "authentication_error", None, "invalid_api_key")

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
    async def completions(request: Request) -> Response:
        return await _serve(state, "completions", request)

    @app.post("/v1/chat/completions", dependencies=[Depends(check_key)])
    async def chat_completions(request: Request) -> Response:
        return await _serve(state, "chat", request)

    app.openapi = lambda: openapi_document(app, model_name)  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s)
    return app


# serving one request -----------------------------------------------------------------------------
async def _serve(state: _State, kind: Kind, request: Request) -> Response:
    endpoint = "chat" if kind == "chat" else "completions"
    try:
        if state.draining:
            raise APIError(503, "the server is shutting down", "service_unavailable", None, "shutting_down")
        try:
            raw = await request.body()
        except ClientDisconnect:
            who = f"{request.client.host}:{request.client.port}" if request.client else "a client"
            log.warning("%s left before sending its whole request body to %s", who, request.url.path)
            state.metrics.disconnects += 1
            state.metrics.request_done(endpoint, 499)
            return Response(status_code=499)
        ctx = await parse_request(
            raw, kind, state.engine, state.model_name, state.limits, state.char_limit, state.value_limit
        )
        try:
            handles = state.front.submit_all(ctx.prompts, ctx.params, ctx.stream)
        except Exception as e:
            raise engine_error(e) from e
    except APIError as e:
        state.metrics.request_done(endpoint, e.status)
        raise
    formatter = ResponseFormatter(ctx, state.engine.tokenizer)
    ignored = {"X-Ignored-Fields": ", ".join(ctx.ignored)} if ctx.ignored else {}
    if ctx.ignored:
        log.warning("fields present in the request but ignored: %s", ", ".join(ctx.ignored))
    if ctx.stream:
        return _ClosingStreamingResponse(
            _stream(state, ctx, formatter, handles),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **ignored},
        )
    response = await _whole(state, ctx, formatter, request, handles)
    response.headers.update(ignored)
    return response


async def _whole(
    state: _State, ctx: RequestContext, formatter: ResponseFormatter, request: Request, handles: list[Any]
) -> Response:
    endpoint = "chat" if ctx.chat else "completions"
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
    response = formatter.whole(outputs)
    state.metrics.tokens(formatter.n_prompt, formatter.n_completion)
    state.metrics.latency(None, time.perf_counter() - ctx.t0, formatter.n_completion)
    state.metrics.request_done(endpoint, 200)
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


async def _stream(
    state: _State, ctx: RequestContext, formatter: ResponseFormatter, handles: list[Any]
) -> AsyncIterator[str]:
    endpoint = "chat" if ctx.chat else "completions"
    first: float | None = None
    finished = False
    status = 200
    state.metrics.in_flight += 1
    try:
        async for p, delta in _merge(handles):
            if first is None and delta.token_ids:
                first = time.perf_counter() - ctx.t0
            chunk = formatter.chunk(p, delta)
            if chunk is not None:
                yield sse(chunk)
        if ctx.include_usage:
            yield sse(formatter.usage_chunk())
        yield "data: [DONE]\n\n"
        finished = True
    except (asyncio.CancelledError, GeneratorExit):  # the client went away
        status = 499
        state.metrics.disconnects += 1
        raise
    except Exception as e:  # the engine failed mid-stream: tell the client in-band
        err = engine_error(e)
        status = err.status
        yield sse(err.body())
        yield "data: [DONE]\n\n"
    finally:
        for h in handles:
            h.cancel()
        state.metrics.in_flight -= 1
        state.metrics.request_done(endpoint, status)
        if finished:
            state.metrics.tokens(formatter.n_prompt, formatter.n_completion)
            state.metrics.latency(first, time.perf_counter() - ctx.t0, formatter.n_completion)


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
    limits: Limits | None = None,
    trace: str | None = None,
) -> None:
    """Run the server until SIGTERM/SIGINT; requests in flight finish first (up to ``drain_timeout``).
    ``trace``: a trace store that records every request and response (toolbox.tracing.serving)."""
    import uvicorn

    app = build_app(
        engine, model_name, api_key=api_key, max_queue=max_queue, drain_timeout=drain_timeout, limits=limits
    )
    if trace:  # toolbox serve --trace FILE
        from toolbox.tracing.serving import TraceMiddleware

        app = TraceMiddleware(app, trace)
    from toolbox.serving.openai.timeouts import guarded_h11

    limits = limits or Limits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_h11(limits.header_timeout_s),
        log_level=log_level,
        timeout_graceful_shutdown=int(drain_timeout),
        timeout_keep_alive=30,
        backlog=2048,
        access_log=False,
    )
    server = uvicorn.Server(config)
    # What exists now (model, engine, torch.compile's caches) lives as long as the server: collect
    # once and move it out of the collector's sight, as vLLM does after start-up; otherwise a full
    # collection walks it all holding the GIL (measured: benchmarks/results/measurement_notes.md).
    gc.collect()
    gc.freeze()
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
