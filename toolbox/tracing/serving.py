"""Tracing for ``toolbox serve --trace FILE``: every chat / completion request and its response.

``TraceMiddleware`` is an ASGI middleware around the OpenAI-compatible app: it copies the body of
each ``POST /v1/chat/completions`` and ``/v1/completions`` request and of its response (JSON, or the
server-sent events of a streamed one, reassembled: content and tool-call deltas by index) and
records one ``llm_call`` per returned choice: the request's messages (or prompt) and ``tools`` as
inputs, the choice's message (content, ``tool_calls``) as output, the model, the usage, the finish
reason, the latency, the sampling settings in ``metadata``. Choices of one request are siblings
(one trace, one parent), so ``to-dataset --format preference`` can pair them once scored. Request
headers are never read except ``X-Session-Id`` (the session of the record) and the W3C
``traceparent`` (the caller's trace and span: an agent that traces its own run into the same store
gets the server's model calls as children of its span, so a score it puts on its run filters
them): the API key in ``Authorization`` is never stored, and the built-in redactor runs on
everything else. A failed request (status >= 400) is recorded with its error. Off unless the server is started with it:

    app = TraceMiddleware(app, "traces.sqlite")     # the one line in toolbox.serving
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from toolbox.tracing.record import ActionRecord, chat_to_messages, new_span_id, new_trace_id, text_message
from toolbox.tracing.redact import default_redactor
from toolbox.tracing.tracer import Tracer

ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
SETTINGS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "seed",
    "stop",
    "stream",
)


class RequestTracer:
    """Records OpenAI-format requests and responses as ActionRecords (see the module docstring).

    Args:
        store: a trace store path (``.sqlite`` for a server with several workers) or a Tracer.
        sample_rate: fraction of requests recorded.
        flush_every: records buffered between writes (a crash loses at most these).
    """

    def __init__(self, store: str | Path | Tracer, sample_rate: float = 1.0, flush_every: int = 16) -> None:
        self.tracer = (
            store
            if isinstance(store, Tracer)
            else Tracer(store, sample_rate=sample_rate, redact=default_redactor, flush_every=flush_every)
        )
        self.sample_rate = sample_rate

    def record(
        self,
        kind: str,
        request: dict[str, Any],
        response: dict[str, Any] | None,
        start_time: float,
        end_time: float,
        status: int = 200,
        error: str | None = None,
        session_id: str | None = None,
        trace_id: str | None = None,
        parent_id: str | None = None,
    ) -> list[ActionRecord]:
        """The records of one request (one per choice; one with the error if it failed)."""
        if self.sample_rate < 1.0 and self.tracer._rng.random() >= self.sample_rate:
            return []
        if kind == "chat":
            inputs = chat_to_messages(request.get("messages") or [])
        else:
            prompt = request.get("prompt")
            inputs = [text_message("user", prompt if isinstance(prompt, str) else json.dumps(prompt))]
        meta = {k: request[k] for k in SETTINGS if request.get(k) is not None}
        meta["endpoint"] = kind
        if status != 200:
            meta["status"] = status
        trace = trace_id or new_trace_id()
        usage = (response or {}).get("usage") or {}
        choices = (response or {}).get("choices") or [None]
        records = []
        for choice in choices:
            outputs = None
            finish = None
            if choice is not None:
                finish = choice.get("finish_reason")
                if kind == "chat":
                    message = dict(choice.get("message") or {"role": "assistant", "content": ""})
                    message.setdefault("role", "assistant")
                    outputs = chat_to_messages([message])
                else:
                    outputs = [text_message("assistant", choice.get("text", ""))]
            records.append(
                ActionRecord(
                    "llm_call",
                    "chat" if kind == "chat" else "text_completion",
                    id=new_span_id(),
                    parent_id=parent_id,
                    trace_id=trace,
                    session_id=session_id,
                    inputs=inputs,
                    outputs=outputs,
                    tools=request.get("tools"),
                    model=request.get("model") or (response or {}).get("model"),
                    operation="text_completion" if kind != "chat" else None,
                    input_tokens=usage.get("prompt_tokens"),
                    output_tokens=usage.get("completion_tokens") if len(choices) == 1 else None,
                    finish_reason=finish,
                    error=error,
                    start_time=start_time,
                    end_time=end_time,
                    metadata={
                        **meta,
                        "choice": choice.get("index", 0) if choice else 0,
                        "response_id": (response or {}).get("id"),
                    },
                    tags=["serve"],
                )  # fmt: skip
            )
        for r in records:
            self.tracer.emit(r)
        return records

    def flush(self) -> None:
        self.tracer.flush()

    def close(self) -> None:
        self.tracer.close()


def assemble_stream(body: bytes, kind: str) -> dict[str, Any] | None:
    """The response object a streamed (server-sent events) answer adds up to: each choice's
    content (or text) and tool calls (deltas joined by index), finish reason, usage, id, model."""
    choices: dict[int, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]" or not data:
            continue
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if "error" in chunk:
            out["error"] = chunk["error"]
            continue
        out.setdefault("id", chunk.get("id"))
        out.setdefault("model", chunk.get("model"))
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for c in chunk.get("choices") or ():
            i = c.get("index", 0)
            acc = choices.setdefault(i, {"index": i, "content": "", "tool_calls": {}, "finish_reason": None})
            if c.get("finish_reason"):
                acc["finish_reason"] = c["finish_reason"]
            if kind != "chat":
                acc["content"] += c.get("text") or ""
                continue
            delta = c.get("delta") or {}
            acc["content"] += delta.get("content") or ""
            for tc in delta.get("tool_calls") or ():
                slot = acc["tool_calls"].setdefault(
                    tc.get("index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
    if not choices and not out:
        return None
    result = []
    for i in sorted(choices):
        acc = choices[i]
        if kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": acc["content"]}
            if acc["tool_calls"]:
                message["tool_calls"] = [acc["tool_calls"][k] for k in sorted(acc["tool_calls"])]
            result.append({"index": i, "message": message, "finish_reason": acc["finish_reason"]})
        else:
            result.append({"index": i, "text": acc["content"], "finish_reason": acc["finish_reason"]})
    out["choices"] = result
    return out


class TraceMiddleware:
    """ASGI middleware recording the OpenAI routes' requests and responses (module docstring).

    Args:
        app: the ASGI app (``toolbox.serving.openai.app.build_app``'s).
        tracer: a RequestTracer, or a store path for one.
    """

    def __init__(self, app: Any, tracer: RequestTracer | str | Path) -> None:
        self.app = app
        self.tracer = tracer if isinstance(tracer, RequestTracer) else RequestTracer(tracer)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = ROUTES.get(scope.get("path", "")) if scope.get("type") == "http" else None
        if kind is None or scope.get("method") != "POST":
            if scope.get("type") == "lifespan":
                return await self._lifespan(scope, receive, send)
            return await self.app(scope, receive, send)
        request_body: list[bytes] = []
        response_body: list[bytes] = []
        state: dict[str, Any] = {"status": 500, "stream": False}

        async def receive_copy() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                request_body.append(message.get("body", b""))
            return message

        async def send_copy(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                for k, v in message.get("headers") or ():
                    if k.lower() == b"content-type" and b"text/event-stream" in v:
                        state["stream"] = True
            elif message["type"] == "http.response.body":
                response_body.append(message.get("body", b""))
            await send(message)

        start = time.time()
        error = None
        try:
            await self.app(scope, receive_copy, send_copy)
        except BaseException as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._record(kind, scope, b"".join(request_body), b"".join(response_body), state, start, error)

    def _record(self, kind, scope, request_bytes, response_bytes, state, start, error) -> None:
        try:
            request = json.loads(request_bytes or b"{}")
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        response = None
        if state["stream"]:
            response = assemble_stream(response_bytes, kind)
            if response and "error" in response:
                error = error or json.dumps(response.pop("error"))
        else:
            try:
                response = json.loads(response_bytes) if response_bytes else None
            except ValueError:
                response = None
        status = state["status"]
        if status >= 400 and error is None:
            detail = (response or {}).get("error") if isinstance(response, dict) else None
            error = f"HTTP {status}: {(detail or {}).get('message', '') if isinstance(detail, dict) else detail or ''}".strip()
            response = None
        session = trace = parent = None
        for k, v in scope.get("headers") or ():  # the only headers read: never Authorization
            k = k.lower()
            if k == b"x-session-id":
                session = v.decode("latin-1")
            elif k == b"traceparent":  # W3C trace context: the caller's trace and span
                parts = v.decode("latin-1").split("-")
                if len(parts) == 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
                    trace, parent = parts[1], parts[2]
        self.tracer.record(
            kind, request, response, start, time.time(), status=status, error=error,
            session_id=session, trace_id=trace, parent_id=parent,
        )  # fmt: skip

    async def _lifespan(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_copy(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                self.tracer.close()
            await send(message)

        await self.app(scope, receive, send_copy)
