"""``EngineFront``: one way for the server to submit a request to any engine.

The torch engine has its own ``submit`` (continuous batching, its own queue limit); any other engine
(hf, vllm, sglang, http) is driven through its ``generate_async`` / ``stream`` by a handle with the
same surface (``await wait()``, ``async for delta in handle``, ``cancel()``), and the front keeps a
server-side limit of ``max_queue`` requests in flight (one more raises ``QueueFullError``, a 429).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from toolbox.serving.engine import InferenceEngine, QueueFullError, RequestOutput, SamplingParams, StreamDelta


class GenericHandle:
    """A request to an engine without ``submit``: its ``stream`` or ``generate_async``."""

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
    """Submits requests: the engine's own ``submit`` where it has one, else a ``GenericHandle``."""

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
        return GenericHandle(self, ids, params, stream)

    def submit_all(self, prompts: list[list[int]], params: SamplingParams, stream: bool) -> list[Any]:
        """One handle per prompt; if one submission fails, the others are cancelled and it raises."""
        handles: list[Any] = []
        try:
            for ids in prompts:
                handles.append(self.submit(ids, params, stream))
        except BaseException:
            for h in handles:
                h.cancel()
            raise
        return handles

    def stats(self) -> dict[str, int]:
        stats = dict(self.engine.stats() or {})
        if not self.native:
            stats.setdefault("running", self.in_flight)
        return stats
