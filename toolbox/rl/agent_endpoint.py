"""An OpenAI-compatible endpoint served from a trainer's engine, whose model calls become episodes.

A user's agent (their own loop, the ``openai`` client) is pointed at ``AgentEndpoint.base_url(r)``
instead of its usual server; the endpoint is ``toolbox serve``'s app (``build_app``) around the
trainer's engine, so requests are parsed, rendered and tokenized exactly as the server does. Every
chat request is recorded (``CallRecorder``): the agent program it came from (``r``, the
``/run{r}`` prefix of its base URL), its ``X-Session-Id`` header (the task: a group's episodes
share it), its W3C ``traceparent`` trace id (one agent run; else the session), its body, and the
engine's answer: the prompt ids the server tokenized, the sampled tokens, their log-probs (asked
of the engine whatever the client asked; the response shows them only if the client did).

``episodes_from_calls`` turns one episode's calls into an ``Episode`` of ``toolbox.rl.episodes``:
the first call's prompt is the opening prompt; each further call must extend the tokens so far
(its prompt ids start with them: the agent appended to the conversation and the chat template
re-rendered the earlier replies as they were sampled); what it adds (tool replies, the next
generation prompt) is environment text with mask 0, then its sampled tokens with mask 1. A call
that does not extend them (the agent rewrote its history, or a reply re-renders to other tokens)
ends the episode's row there: the calls after it are counted (``unchained``), not trained on, so
no token is ever trained on under a context the model did not see.

Only the first choice of a request continues a conversation (agents ask ``n = 1``); a streamed
request is answered whole, as one delta.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from toolbox.core.errors import DataError
from toolbox.rl.episodes import Episode, Turn
from toolbox.rl.text_env import Step, ToolRun
from toolbox.serving.engine import InferenceEngine, RequestOutput, SamplingParams, StreamDelta

_CALLER: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("agent_caller", default=None)


@dataclass
class Call:
    """One chat request through the endpoint and the engine's answer."""

    run: int
    session: str | None
    trace_id: str | None
    body: bytes
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    start: float
    end: float

    @property
    def request(self) -> dict[str, Any]:
        try:
            body = json.loads(self.body or b"{}")
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}


class CallRecorder(InferenceEngine):
    """The trainer's engine as the endpoint sees it: every request's tokens recorded (see the module
    docstring). Requests go to the engine's running batch (``submit_request``) where it has one."""

    def __init__(self, engine: InferenceEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.max_model_len
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def generate(self, prompts, params: SamplingParams) -> list[RequestOutput]:
        return self.engine.generate(prompts, params)

    def _run(self, ids: list[int], params: SamplingParams) -> RequestOutput:
        if self.engine.supports_submit:
            return self.engine.submit_request(ids, params, stream=False, queue_limit=False).result()
        return self.engine.generate([ids], params)[0]

    async def generate_async(self, prompt, params: SamplingParams) -> RequestOutput:
        ids = self.engine.encode_prompt(prompt)
        start = time.time()
        out = await asyncio.to_thread(self._run, ids, replace(params, logprobs=True))
        caller = _CALLER.get()
        if caller is not None and caller["chat"] and out.completions:
            c = out.completions[0]
            call = Call(
                caller["run"], caller["session"], caller["trace_id"], bytes(caller["body"]),
                list(out.prompt_token_ids or ids), list(c.token_ids),
                [float(x) for x in (c.logprobs or [0.0] * len(c.token_ids))], c.text, c.finish_reason,
                start, time.time(),
            )  # fmt: skip
            with self.lock:
                self.calls.append(call)
        return out

    async def stream(self, prompt, params: SamplingParams):
        out = await self.generate_async(prompt, params)
        for i, c in enumerate(out.completions):
            yield StreamDelta(i, c.token_ids, c.text, c.finish_reason, c.logprobs, c.top_logprobs)

    def take(self) -> list[Call]:
        """The calls recorded since the last ``take``, in the order they finished."""
        with self.lock:
            calls, self.calls = self.calls, []
        return calls


class CallerMiddleware:
    """ASGI: ``/run{r}/v1/...`` is ``/v1/...`` of agent program ``r``; the request's session,
    trace id and body are kept for ``CallRecorder`` (a context variable of the request's task)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, run = scope["path"], 0
        head, _, rest = path.lstrip("/").partition("/")
        if head.startswith("run") and head[3:].isdigit():
            run, path = int(head[3:]), "/" + rest
            scope = {**scope, "path": path, "raw_path": path.encode()}
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        parent = headers.get("traceparent", "").split("-")
        caller = {
            "run": run,
            "session": headers.get("x-session-id"),
            "trace_id": parent[1] if len(parent) == 4 and len(parent[1]) == 32 else None,
            "body": bytearray(),
            "chat": path.rstrip("/") == "/v1/chat/completions",
        }

        async def receive_copy() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                caller["body"] += message.get("body", b"")
            return message

        token = _CALLER.set(caller)
        try:
            await self.app(scope, receive_copy, send)
        finally:
            _CALLER.reset(token)


class AgentEndpoint:
    """``toolbox serve``'s app around ``engine`` on a free loopback port, in a thread of this process.

    ``base_url(r)`` is agent program ``r``'s base URL; ``recorder.take()`` the calls made so far.
    """

    def __init__(self, engine: InferenceEngine, model_name: str = "agent", host: str = "127.0.0.1") -> None:
        import uvicorn

        from toolbox.serving.openai.app import build_app

        self.recorder = CallRecorder(engine)
        app = CallerMiddleware(build_app(self.recorder, model_name, shutdown_engine=False))
        with socket.socket() as s:
            s.bind((host, 0))
            self.port = s.getsockname()[1]
        self.host = host
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="agent-endpoint", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the agent endpoint did not start on {host}:{self.port}")
            time.sleep(0.02)

    def base_url(self, run: int = 0) -> str:
        return f"http://{self.host}:{self.port}/run{run}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


@dataclass
class Chained:
    """The episodes of a round's calls, and what could not be trained on."""

    episodes: dict[tuple[int, str], Episode] = field(default_factory=dict)  # (run, episode key)
    sessions: dict[tuple[int, str], str] = field(default_factory=dict)  # its task (X-Session-Id)
    unchained: int = 0  # calls after a break in an episode's tokens
    no_session: int = 0  # calls without an X-Session-Id header


def episodes_from_calls(calls: list[Call]) -> Chained:
    """Calls grouped into episodes (agent program, trace id or else session), each chained into one
    row (see the module docstring). ``group``/``index`` are left for the caller to set."""
    from toolbox.data.hermes.calls import parse

    out = Chained()
    broken: set[tuple[int, str]] = set()
    for call in sorted(calls, key=lambda c: c.start):
        if call.session is None:
            out.no_session += 1
            continue
        key = (call.run, call.trace_id or call.session)
        request = call.request
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        content, parsed = parse(call.text)
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if parsed:
            message["tool_calls"] = [
                {
                    "id": f"call_{k}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for k, c in enumerate(parsed)
            ]
        episode = out.episodes.get(key)
        if key in broken:
            out.unchained += 1
            continue
        if episode is None:
            episode = Episode(
                task={"session": call.session, "run": call.run}, group=0, index=call.run, env=None,  # type: ignore[arg-type]
                messages=list(messages), tools=request.get("tools"), prompt_ids=list(call.prompt_ids),
                opening=len(messages), start=call.start,
            )  # fmt: skip
            out.episodes[key], out.sessions[key] = episode, call.session
        else:
            so_far = episode.all_ids()
            if call.prompt_ids[: len(so_far)] != so_far:
                broken.add(key)
                out.unchained += 1
                continue
            piece = call.prompt_ids[len(so_far) :]
            episode.ids += piece
            episode.mask += [0] * len(piece)
            episode.logprobs += [0.0] * len(piece)
            previous = episode.turns[-1]
            added = messages[len(previous.messages) + 1 :]  # after the reply it had
            runs = [
                ToolRun(str(m.get("tool_call_id", "")), _tool_name(previous.message, m), "", str(m.get("content", "")))
                for m in added
                if m.get("role") == "tool"
            ]  # fmt: skip
            previous.step = Step(messages=added, tool_runs=runs)
            episode.messages = list(messages)
        episode.ids += call.token_ids
        episode.mask += [1] * len(call.token_ids)
        episode.logprobs += call.logprobs[: len(call.token_ids)]
        prompt_tokens = len(call.prompt_ids)
        episode.turns.append(
            Turn(list(messages), message, call.text, prompt_tokens, len(call.token_ids), call.finish_reason,
                 None, call.start, call.end)
        )  # fmt: skip
        episode.messages = [*messages, message]
        episode.finish_reason = call.finish_reason
        episode.end = call.end
    for episode in out.episodes.values():
        episode.done = True
    if not out.episodes and calls:
        raise DataError(
            f"the agent made {len(calls)} model calls, none with an X-Session-Id header: the trainer "
            "groups the episodes of one task by it; send it with every request (extra_headers)."
        )
    return out


def _tool_name(reply: dict[str, Any], tool_message: dict[str, Any]) -> str:
    """The name of the call a tool message answers (by id, else the reply's only call)."""
    calls = reply.get("tool_calls") or []
    for call in calls:
        if call["id"] == tool_message.get("tool_call_id"):
            return call["function"]["name"]
    return calls[0]["function"]["name"] if len(calls) == 1 else str(tool_message.get("name", "tool"))
