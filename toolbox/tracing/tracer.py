"""Tracer: records what code does as ActionRecords, nested through contextvars.

    tracer = Tracer("traces.sqlite", session_id="s1")
    with tracer.span("agent", "solve") as run:                 # a root: a new trace
        with tracer.span("llm_call", "chat", inputs=messages, model="tiny") as call:
            call.outputs = [...]; call.output_tokens = 12
        answer = calculator("2+3")                             # @tracer.trace(kind="tool_call")
    tracer.score(run.id, "correct", True, source="reward")     # a score after the fact
    tracer.close()

A span's parent is the span open in the current context: a thread starts with no open span (a
root of its own unless it runs in a copied context), an asyncio task keeps the span that was open
when it was created, and spans opened inside it do not leak into its siblings. Sampling is decided
once per trace, at its root (``sample_rate``), so a trace is kept whole or not at all.

Before a record is stored it passes through ``redact`` (the built-in ``Redactor`` by default: API
keys, bearer tokens, e-mail addresses, phone numbers; ``None`` keeps everything; any callable
``record -> record | None``). Records are buffered and written in batches of ``flush_every``
(and on ``flush``/``close``/exit of the process); a record with a value JSON cannot store is
reported (a warning naming the field, ``tracer.unserialisable``) and stored with that value as
its ``repr`` and the tag ``unserialisable``, never dropped.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import inspect
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolbox.tracing.record import (
    KINDS,
    ActionRecord,
    Score,
    SerializationError,
    TraceError,
    dumps,
    encode,
    make_serialisable,
    new_span_id,
    new_trace_id,
)
from toolbox.tracing.redact import Redactor, default_redactor
from toolbox.tracing.stores import TraceStore, open_store

log = logging.getLogger(__name__)

_NOT_SAMPLED = object()  # the context value inside a trace that sampling left out
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("toolbox_trace_span", default=None)
_live: weakref.WeakSet[Tracer] = weakref.WeakSet()


def current_record() -> ActionRecord | None:
    """The span open in this context (None outside any, or in a trace that is not sampled)."""
    value = _current.get()
    return value if isinstance(value, ActionRecord) else None


class Tracer:
    """Creates ActionRecords and writes them to a store (see the module docstring).

    Args:
        store: a TraceStore, or a path (``.jsonl`` / ``.sqlite``).
        session_id: put on every record (a conversation, a user session, a training run).
        sample_rate: fraction of traces kept (decided at each root span).
        redact: the redaction hook (default: the built-in redactor; None: off).
        flush_every: records buffered before a write (1: each record written at once).
        tags: tags put on every record.
        seed: seeds the sampling decisions (None: random).
    """

    def __init__(
        self,
        store: TraceStore | str | Path,
        session_id: str | None = None,
        sample_rate: float = 1.0,
        redact: Callable[[ActionRecord], ActionRecord | None] | None = default_redactor,
        flush_every: int = 256,
        tags: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise TraceError(f"Tracer: sample_rate {sample_rate}; choose a fraction in [0, 1].")
        self.store = store if isinstance(store, TraceStore) else open_store(store)
        self.session_id = session_id
        self.sample_rate = sample_rate
        self.redact = redact
        self.flush_every = max(1, int(flush_every))
        self.tags = list(tags or ())
        self._rng = random.Random(seed)
        self._buffer: list[ActionRecord] = []
        self._lock = threading.Lock()
        # one writer at a time on the store (its connection is shared by the threads that end
        # spans), and a score for a record being flushed waits until that flush has stored it
        self._write_lock = threading.Lock()
        self.unserialisable = 0
        self.dropped = 0  # by the redaction hook returning None
        self.written = 0
        _live.add(self)

    # spans ----------------------------------------------------------------------------------------
    def start(self, kind: str, name: str, **fields: Any) -> tuple[ActionRecord | None, contextvars.Token]:
        """Open a span without a ``with`` (``end`` closes it): the record, or None when not sampled."""
        if kind not in KINDS:
            raise TraceError(f"span kind {kind!r}; choose one of {', '.join(KINDS)}.")
        parent = _current.get()
        if parent is _NOT_SAMPLED:
            return None, _current.set(_NOT_SAMPLED)
        if parent is None:
            if self.sample_rate < 1.0 and self._rng.random() >= self.sample_rate:
                return None, _current.set(_NOT_SAMPLED)
            trace_id, parent_id = (
                fields.pop("trace_id", None) or new_trace_id(),
                fields.pop("parent_id", None),
            )
        else:
            trace_id, parent_id = parent.trace_id, parent.id
        session = fields.pop("session_id", None) or (parent.session_id if parent is not None else None)
        tags = fields.pop("tags", None)
        record = ActionRecord(
            kind=kind,
            name=name,
            id=new_span_id(),
            parent_id=parent_id,
            trace_id=trace_id,
            session_id=session or self.session_id,
            start_time=time.time(),
            tags=[*self.tags, *tags] if tags else list(self.tags),
            **fields,
        )
        return record, _current.set(record)

    def end(
        self, record: ActionRecord | None, token: contextvars.Token, error: BaseException | None = None
    ) -> None:
        _current.reset(token)
        if record is None:
            return
        record.end_time = time.time()
        if error is not None and record.error is None:
            record.error = f"{type(error).__name__}: {error}"
        self.emit(record)

    def span(self, kind: str, name: str, **fields: Any) -> _Span:
        """A span as a context manager; yields the record (set outputs, tokens, scores on it).

        In a trace that sampling left out it yields a record that is never stored.
        """
        return _Span(self, kind, name, fields)

    def trace(self, kind: str = "custom", name: str | None = None, capture: bool = True) -> Callable:
        """Decorator: each call of the function is a span; its arguments the inputs, its result
        the outputs (``capture=False`` records neither). Works on async functions too."""

        def wrap(fn: Callable) -> Callable:
            span_name = name or fn.__qualname__
            signature = inspect.signature(fn)

            def inputs(args: tuple, kwargs: dict) -> Any:
                if not capture:
                    return None
                try:
                    bound = signature.bind_partial(*args, **kwargs)
                    return dict(bound.arguments)
                except TypeError:
                    return {"args": list(args), "kwargs": kwargs}

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.span(kind, span_name, inputs=inputs(args, kwargs)) as rec:
                        result = await fn(*args, **kwargs)
                        if capture:
                            rec.outputs = result
                        return result

                return async_wrapper

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.span(kind, span_name, inputs=inputs(args, kwargs)) as rec:
                    result = fn(*args, **kwargs)
                    if capture:
                        rec.outputs = result
                    return result

            return wrapper

        return wrap

    # records --------------------------------------------------------------------------------------
    def emit(self, record: ActionRecord) -> None:
        """Redact and buffer a finished record (spans call this; so can code that builds records).

        The built-in ``Redactor`` runs at flush, on the records whose strings may hold a secret
        (``Redactor.needed_any``: a few substring tests); any other hook runs here on each record.
        """
        if self.redact is not None and not isinstance(self.redact, Redactor):
            record = self.redact(record)
            if record is None:
                self.dropped += 1
                return
        with self._lock:
            self._buffer.append(record)
            full = len(self._buffer) >= self.flush_every
        if full:
            self.flush()

    def score(
        self,
        record_id: str,
        name: str,
        value: float | str | bool,
        source: str = "api",
        comment: str | None = None,
    ) -> None:
        """Attach a score to a record, buffered or stored."""
        score = Score(name, value, source, comment=comment)
        with self._lock:
            for r in self._buffer:
                if r.id == record_id:
                    r.scores.append(score)
                    return
        with self._write_lock:
            self.store.add_score(record_id, score)

    def flush(self) -> None:
        with self._write_lock:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
        if not batch:
            return
        redactor = self.redact if isinstance(self.redact, Redactor) else None
        lines = []
        for r in batch:
            texts: list[str] | None = [] if redactor is not None else None
            try:
                line = encode(r, texts)
            except SerializationError as e:
                self.unserialisable += 1
                log.warning("%s; stored with repr() in its place and the tag 'unserialisable'", e)
                r.inputs, r.outputs = make_serialisable(r.inputs), make_serialisable(r.outputs)
                r.metadata, r.tools = make_serialisable(r.metadata), make_serialisable(r.tools)
                r.tags.append("unserialisable")
                texts = [] if redactor is not None else None
                line = encode(r, texts)
            if redactor is not None and redactor.needed_any(texts):
                redactor(r)
                line = dumps(r)
            lines.append(line)
        self.written += self.store.write(batch, lines=lines)

    def close(self) -> None:
        self.flush()
        self.store.close()
        _live.discard(self)

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Span:
    """``with tracer.span(...) as record``: start on enter, end (with the exception, if any) on exit."""

    __slots__ = ("tracer", "kind", "name", "fields", "record", "token")

    def __init__(self, tracer: Tracer, kind: str, name: str, fields: dict[str, Any]) -> None:
        self.tracer, self.kind, self.name, self.fields = tracer, kind, name, fields

    def __enter__(self) -> ActionRecord:
        self.record, self.token = self.tracer.start(self.kind, self.name, **self.fields)
        return self.record if self.record is not None else ActionRecord(kind=self.kind, name=self.name)

    def __exit__(self, tp: Any, error: BaseException | None, tb: Any) -> bool:
        self.tracer.end(self.record, self.token, error)
        return False


@atexit.register
def _flush_all() -> None:
    for tracer in list(_live):
        try:
            tracer.flush()
        except Exception as e:  # noqa: BLE001 - at exit: report, do not raise
            log.warning("trace flush at exit failed: %s", e)
