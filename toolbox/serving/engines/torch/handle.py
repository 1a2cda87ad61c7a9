"""``RequestHandle``: a request submitted to the torch engine's scheduler, as its caller holds it.

Wait for its output (``result()`` from any thread, ``await wait()`` in asyncio code, or
``add_done_callback(fn)``: a caller waiting on many requests blocks on its own condition until one of
them is done, instead of polling ``done``; ``add_completion_callback(fn)`` hears of each of the
``n`` completions as it finishes), stream its deltas (``async for delta in handle``), or
``cancel()`` it. The scheduler thread feeds it through
``_emit`` / ``_finish``, which hand everything to the caller's event loop thread-safely: through
the scheduler's ``Outbox``, which collects a step's deliveries and sends each event loop one
batch per step (one ``call_soon_threadsafe``, a socket write, instead of one per token: 40
streams cost ~0.3-0.6 ms of the engine thread per step otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from toolbox.serving.engine import Completion, RequestOutput, StreamDelta

log = logging.getLogger(__name__)

_END = object()


class Outbox:
    """Calls for event loops that the engine thread collects during a step and ``flush``es after it:
    each loop gets one ``call_soon_threadsafe`` running them in order (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[asyncio.AbstractEventLoop, list[tuple[Callable[..., Any], tuple]]] = {}

    def put(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._calls.setdefault(loop, []).append((fn, args))

    def flush(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, {}
        for loop, batch in calls.items():
            try:
                loop.call_soon_threadsafe(_run_batch, loop, batch)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                pass


def _run_batch(loop: asyncio.AbstractEventLoop, batch: list[tuple[Callable[..., Any], tuple]]) -> None:
    for fn, args in batch:
        try:
            fn(*args)
        except Exception as e:  # as the loop treats a failing callback: report it, run the others
            loop.call_exception_handler({"message": f"exception in {fn!r}", "exception": e})


class RequestHandle:
    """A submitted request: wait for its output, stream its deltas, or cancel it.

    Created by ``submit``. When submitted from a running asyncio loop, ``wait()`` and ``async for``
    are fed from the engine thread through that loop; ``result()`` works from any thread.
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        cancel: Callable[[str], None],
        stream: bool,
        outbox: Outbox | None = None,
    ) -> None:
        self.request_id = request_id
        self._outbox = outbox  # None: each call goes to the loop at once
        self.prompt_token_ids = prompt_token_ids
        self.stream = stream
        self._cancel = cancel
        self._event = threading.Event()
        self._callbacks: list[Callable[[RequestHandle], Any]] = []  # add_done_callback's
        self._each: list[Callable[[RequestHandle, int, Completion], Any]] = []  # add_completion_callback's
        self._completions: list[tuple[int, Completion]] = []  # (index, completion) of those finished
        self._lock = threading.Lock()  # a callback added while the request finishes runs once
        self._output: RequestOutput | None = None
        self._error: BaseException | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._queue: asyncio.Queue | None = asyncio.Queue() if self._loop and stream else None
        self._future: asyncio.Future | None = self._loop.create_future() if self._loop else None

    # caller side -----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finishes; its output, or the error that ended it."""
        if not self._event.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._output is not None
        return self._output

    def add_done_callback(self, fn: Callable[[RequestHandle], Any]) -> None:
        """Call ``fn(handle)`` once the request has finished (its output or error is set): from the
        engine thread, in the step that finished it (keep ``fn`` short: the step waits for it), or
        at once, here, if it has already finished."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def add_completion_callback(self, fn: Callable[[RequestHandle, int, Completion], Any]) -> None:
        """Call ``fn(handle, index, completion)`` as each of the request's ``n`` completions finishes
        (from the engine thread, in its step; at once, here, for those finished already), before the
        request is done: a caller that continues each completion on its own (a multi-turn rollout's
        episodes of one opening prompt) need not wait for the request's longest. A request that
        fails reports no more completions: ``add_done_callback`` hears of it."""
        with self._lock:
            self._each.append(fn)
            finished = list(self._completions)
        for index, completion in finished:
            fn(self, index, completion)

    async def wait(self) -> RequestOutput:
        """Await the output (cancelling the awaiting task cancels the request)."""
        if self._future is None:
            return await asyncio.to_thread(self.result)
        try:
            return await asyncio.shield(self._future)
        except asyncio.CancelledError:
            self.cancel()
            raise

    async def __aiter__(self) -> AsyncIterator[StreamDelta]:
        """The deltas as they are generated (only for ``stream=True`` handles made inside a loop)."""
        if self._queue is None:
            raise RuntimeError("iterate a handle submitted with stream=True from inside an asyncio loop")
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    break
                yield item
            if self._error is not None:
                raise self._error
        finally:
            if not self.done:
                self.cancel()

    def cancel(self) -> None:
        """Abort the request (no-op once it finished); its output ends with finish_reason "abort"."""
        if not self.done:
            self._cancel(self.request_id)

    # engine side -----------------------------------------------------------------------------------
    def _call_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._loop is None:
            return
        if self._outbox is not None:
            self._outbox.put(self._loop, fn, *args)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _emit(self, delta: StreamDelta) -> None:
        if self._queue is not None:
            self._call_in_loop(self._queue.put_nowait, delta)

    def _resolve(self) -> None:  # runs in the caller's loop
        if self._future is not None and not self._future.done():
            if self._error is not None:
                self._future.set_exception(self._error)
                self._future.exception()  # mark retrieved: a stream consumer may never await it
            else:
                self._future.set_result(self._output)
        if self._queue is not None:
            self._queue.put_nowait(_END)

    def _completion_finished(self, index: int, completion: Completion) -> None:
        with self._lock:
            self._completions.append((index, completion))
            each = list(self._each)
        for fn in each:
            self._call(fn, "completion", index, completion)

    def _finish(self, output: RequestOutput | None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._output, self._error = output, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        self._call_in_loop(self._resolve)
        for fn in callbacks:
            self._call(fn, "done")

    def _call(self, fn: Callable[..., Any], kind: str, *args: Any) -> None:
        """``fn(self, *args)`` from the engine thread: a caller's bug is logged, never raised (it must
        not fail the engine's step for everyone)."""
        try:
            fn(self, *args)
        except Exception:
            log.exception("a %s callback of request %s failed", kind, self.request_id)
