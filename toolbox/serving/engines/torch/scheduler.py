"""Continuous batching: requests join the running batch between decode steps and leave it when done.

One background thread owns the model. Each iteration it

1. drops cancelled requests (waiting or running);
2. admits waiting requests, first come first served, while the batch has free slots (a request
   with ``n`` completions takes ``n``) and the prefill budget lasts; their prompts are prefilled
   together (one forward) and each completion samples its first token. A prompt longer than
   ``prefill_chunk_tokens`` is prefilled a chunk per iteration instead (``chunked_prefill.py``)
   and joins the batch after its last chunk. A prompt that begins with a sequence finished before
   (a conversation's next turn) has that sequence's keys and values copied in and prefills only
   the rest (``prefix_cache.py``);
3. runs one decode step for every running completion and samples the next tokens;
4. hands each token to its request (streamed requests get a ``StreamDelta`` at once), finishes
   completions that hit a stop id, a stop string, the end of their grammar (constrained
   decoding, ``structured.py``: each completion walks its own matcher), ``max_tokens`` or the
   context, and frees their slots (the last running completion moves into the hole, so the batch stays packed);
   the keys and values of a finished completion go to the prefix cache.

Callers talk to it through ``submit`` (thread-safe; raises ``QueueFullError`` when ``max_queue_size``
requests are already waiting) and the returned ``RequestHandle``: ``result()`` blocks,
``await wait()`` and ``async for delta in handle`` serve asyncio code, ``cancel()`` aborts
(``handle.py``).

Why this file is longer than ~400 lines: it is one class, the scheduler loop, whose steps (admit,
prefill, decode, sample, append, retire) share the running batch's state and its invariants (packed
slots, one matcher and generator per completion); split across files they would have to reach into
each other's private state.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from toolbox.serving.engine import (
    Completion,
    EngineClosedError,
    EngineError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    StreamDelta,
)
from toolbox.serving.engines.detokenize import IncrementalText, text_decoder
from toolbox.serving.engines.torch.chunked_prefill import PartialPrefill, is_long
from toolbox.serving.engines.torch.handle import Outbox, RequestHandle
from toolbox.serving.engines.torch.prefix_cache import CachedPrefix, PrefixCache
from toolbox.serving.engines.torch.runner import SlotRunner
from toolbox.serving.sampling import (
    SamplingTensors,
    logprobs_and_top,
    make_generator,
    process_logits,
    sample,
)
from toolbox.serving.structured import allowed_tokens

log = logging.getLogger(__name__)


def completion_seed(seed: int | None, index: int) -> int | None:
    """The seed of completion ``index`` of a request seeded with ``seed`` (index 0 keeps ``seed``)."""
    if seed is None or index == 0:
        return seed
    return (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) % 2**63


@dataclass(eq=False)
class _Request:
    id: str
    prompt: list[int]
    params: SamplingParams
    handle: RequestHandle
    stop_ids: frozenset[int]
    limit: int  # most tokens per completion: max_tokens, capped by the context
    needs_text: bool
    matcher: Any = None  # constrained decoding: the grammar's matcher at its start (copied per completion)
    seqs: list[_Seq] = field(default_factory=list)
    unfinished: int = 0
    prefix: CachedPrefix | None = None  # taken from the prefix cache at admission, restored at prefill
    generation: int = -1  # the weights generation of its first forward (-1: not begun)


@dataclass(eq=False)
class _Seq:
    request: _Request
    index: int
    generator: torch.Generator | None
    text: IncrementalText | None
    cache_len: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    matcher: Any = None
    completion: Completion | None = None  # built when it finished


class ContinuousBatcher:
    """The scheduler thread of the torch engine (see the module docstring).

    Args:
        runner: the model with its slot KV cache.
        tokenizer: decodes completions and stop strings.
        eos_ids: the ids that end a completion unless ``ignore_eos``.
        max_batch_size: most completions decoded together (the runner's slots).
        max_queue_size: most requests waiting for a slot; one more raises ``QueueFullError``.
        max_prefill_tokens: prompt tokens (padded) prefilled in one iteration, so that long prompts
            do not stall the running batch for long; at least one request is always admitted.
        prefill_chunk_tokens: a prompt longer than this is prefilled in chunks of this many tokens,
            one per iteration between decode steps (None: every prompt in one forward).
        logprobs_mode: "raw" (log_softmax of the model's logits, as vLLM) or "processed" (of the
            logits after penalty, temperature and top-k/top-p/min-p).
        seed: seeds the generator of requests that carry no seed of their own.
        prefill_threads: torch intra-op threads for prefill steps (None: the process's setting).
        prefix_cache_bytes: the keys and values of finished completions kept for prompts that begin
            with them (``prefix_cache.py``); 0: none.
    """

    def __init__(
        self,
        runner: SlotRunner,
        tokenizer: Any,
        eos_ids: frozenset[int],
        max_batch_size: int,
        max_queue_size: int,
        max_prefill_tokens: int,
        logprobs_mode: str = "raw",
        seed: int = 0,
        prefill_threads: int | None = None,
        prefill_chunk_tokens: int | None = None,
        prefix_cache_bytes: int = 0,
    ) -> None:
        if prefill_chunk_tokens is not None and prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be >= 1 (or None), got {prefill_chunk_tokens}")
        self.runner = runner
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_batch_size = max_batch_size
        self.max_queue_size = max_queue_size
        self.max_prefill_tokens = max_prefill_tokens
        self.logprobs_mode = logprobs_mode
        self.prefill_threads = prefill_threads
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self._partial: PartialPrefill | None = None  # the long prompt being prefilled in chunks
        # the next long prompt, started in the budget _partial's last chunk leaves (one iteration)
        self._next: PartialPrefill | None = None
        self.generator = torch.Generator(device=runner.device)
        self.generator.manual_seed(seed)
        self.step_lock = threading.RLock()  # held while the model runs; update_weights takes it
        self._cv = threading.Condition()
        self._waiting: deque[_Request] = deque()
        self._aborts: set[str] = set()
        self._running: list[_Seq] = []
        self._requests: dict[str, _Request] = {}
        self._idle = threading.Event()  # set while no request is waiting or running
        self._idle.set()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()
        self._tensors: SamplingTensors | None = None  # of the running batch; None when it changed
        self._text_decoder = text_decoder(tokenizer)  # the tokenizer's decode, without its Python overhead
        self._outbox = Outbox()  # the handles' deliveries to event loops, sent once per step
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        self.prompt_tokens = 0  # of the requests prefilled so far
        self.cached_prompt_tokens = 0  # of those, restored from the prefix cache instead of prefilled

    # submission (any thread) -------------------------------------------------------------------------
    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str | None,
        stream: bool,
        bypass_queue_limit: bool = False,
        matcher: Any = None,
    ) -> RequestHandle:
        """Queue a request; ``matcher``: an llguidance matcher its completions must follow."""
        request_id = request_id or f"req-{next(self._ids)}"
        handle = RequestHandle(request_id, prompt, self.abort, stream, self._outbox)
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self.eos_ids
        request = _Request(
            id=request_id,
            prompt=prompt,
            params=params,
            handle=handle,
            stop_ids=frozenset(stop_ids),
            limit=min(params.max_tokens, self.runner.max_model_len - len(prompt)),
            needs_text=stream or bool(params.stop),
            matcher=matcher,
        )
        if params.n > self.max_batch_size:
            raise ValueError(f"n={params.n} exceeds the engine's max_batch_size={self.max_batch_size}")
        with self._cv:
            if self._closed:
                raise EngineClosedError("the engine is shut down")
            if request_id in self._requests:
                raise ValueError(f"request id {request_id!r} is already in use")
            if not bypass_queue_limit and len(self._waiting) >= self.max_queue_size:
                raise QueueFullError(
                    f"{len(self._waiting)} requests are already waiting (engine max_queue_size="
                    f"{self.max_queue_size}); retry later"
                )
            self._requests[request_id] = request
            self._idle.clear()
            self._waiting.append(request)
            self._start()
            self._cv.notify()
        return handle

    def together(self) -> threading.Condition:
        """``with batcher.together(): submit(...); submit(...)``: the requests join the same step (the
        engine thread cannot look at the queue in between; the lock is re-entrant)."""
        return self._cv

    def abort(self, request_id: str) -> None:
        with self._cv:
            if request_id in self._requests:
                self._aborts.add(request_id)
                self._cv.notify()

    def stats(self) -> dict[str, int]:
        with self._cv:
            chunked = sum(p.request.params.n for p in (self._partial, self._next) if p is not None)
            return {
                "waiting": len(self._waiting),
                "running": len(self._running) + chunked,
                "max_batch_size": self.max_batch_size,
                "max_queue_size": self.max_queue_size,
                "prompt_tokens": self.prompt_tokens,
                "prefix_cache_hit_tokens": self.cached_prompt_tokens,
            }

    def drain(self, timeout: float | None = None) -> bool:
        """Block until every submitted request has finished (or ``timeout``); True when idle."""
        return self._idle.wait(timeout)

    def _forget(self, request: _Request) -> None:
        """Drop a finished request from the table (the caller holds the lock)."""
        self._requests.pop(request.id, None)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="toolbox-torch-engine", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread; requests not finished end with ``EngineClosedError``."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
        error = EngineClosedError("the engine was shut down before the request finished")
        with self._cv:
            for request in list(self._requests.values()):
                request.handle._finish(None, error)
            self._requests.clear()
            self._waiting.clear()
            self._running = []
            self._partial = self._next = None
            if self.prefix_cache is not None:
                self.prefix_cache.clear()
            self._idle.set()
        self._outbox.flush()

    # the loop (engine thread) ------------------------------------------------------------------------
    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cv:
                    while not self._closed and not (
                        self._waiting or self._running or self._partial or self._aborts
                    ):
                        self._cv.wait()
                    if self._closed:
                        return
                    aborts, self._aborts = self._aborts, set()
                    admitted = self._admit(aborts)
                try:
                    with self.step_lock:
                        self._drop(aborts)
                        if self._partial is not None or admitted:
                            with self._prefill_threads():
                                if self._partial is not None:
                                    self._prefill_chunk()
                                if admitted:
                                    self._prefill(admitted)
                            self._retire()
                            self._outbox.flush()  # first tokens go out before the decode step
                        if self._running:
                            self._decode()
                            self._retire()
                except Exception as e:  # the model failed: fail what is in flight, keep serving
                    log.exception("torch engine step failed")
                    self._fail_in_flight(EngineError(f"generation failed: {type(e).__name__}: {e}"))
                finally:
                    self._outbox.flush()
                with self._cv:
                    if not self._requests:  # everything finished and retired
                        self._idle.set()

    def _admit(self, aborts: set[str]) -> list[_Request]:
        """Take waiting requests for this iteration: the short ones to prefill now (returned) and
        a long one to start prefilling in chunks (``self._partial``, slots reserved at the top)."""
        chunk = self.prefill_chunk_tokens
        partial = self._partial
        free = self.max_batch_size - len(self._running) - (partial.request.params.n if partial else 0)
        budget = self.max_prefill_tokens
        leftover = 0  # the budget the long prompt's last chunk leaves this iteration
        if partial is not None:  # short prompts join in beside the chunk, a chunk's worth at most
            budget = min(budget, chunk)  # type: ignore[type-var]
            leftover = chunk - partial.remaining if partial.remaining < chunk else 0  # type: ignore[operator]
        admitted: list[_Request] = []
        longest = 0
        while self._waiting:
            request = self._waiting[0]
            if request.id in aborts:
                self._waiting.popleft()
                continue  # dropped by _drop
            cached = self._cached_prefix(request)
            rest = len(request.prompt) - (cached.usable(len(request.prompt)) if cached else 0)
            if is_long(rest, chunk):
                if request.params.n <= free and (partial is None or (leftover and self._next is None)):
                    self._waiting.popleft()
                    self._take_prefix(request, cached)
                    slot = self.max_batch_size - request.params.n
                    started = PartialPrefill(request, slot, len(request.prompt) - rest)
                    if partial is None:
                        self._partial = started
                    else:  # its first chunk follows the last of the current one, in this iteration
                        self._next = started
                break  # first come first served: nothing behind it starts before it
            longest_if = max(longest, rest)
            owed = not admitted and partial is None  # at least one request is always admitted
            if request.params.n > free or (not owed and longest_if * (len(admitted) + 1) > budget):
                break
            self._waiting.popleft()
            self._take_prefix(request, cached)
            admitted.append(request)
            free -= request.params.n
            longest = longest_if
        return admitted

    def _cached_prefix(self, request: _Request) -> CachedPrefix | None:
        """The prefix cache's longest entry that begins ``request``'s prompt (left in the cache)."""
        return self.prefix_cache.match(request.prompt) if self.prefix_cache is not None else None

    def _take_prefix(self, request: _Request, cached: CachedPrefix | None) -> None:
        if cached is not None:
            assert self.prefix_cache is not None
            request.prefix = self.prefix_cache.take(cached)

    def _drop(self, aborts: set[str]) -> None:
        for request_id in aborts:
            request = self._requests.get(request_id)
            if request is None:
                continue
            with self._cv:
                if request in self._waiting:
                    self._waiting.remove(request)
            if self._next is not None and self._next.request is request:
                self._next = None  # its reserved slots are free again
            if self._partial is not None and self._partial.request is request:
                self._partial, self._next = self._next, None
            if not request.seqs:  # never admitted (or cancelled during its chunked prefill)
                p = request.params
                empty = Completion(
                    [], "", "abort", [] if p.logprobs else None, [] if p.logprobs and p.top_logprobs else None
                )
                request.handle._finish(RequestOutput(request.prompt, [empty] * request.params.n))
                with self._cv:
                    self._forget(request)
                continue
            for seq in request.seqs:
                if seq.finish_reason is None:
                    self._finish_seq(seq, "abort")
        self._retire()

    def _fail_in_flight(self, error: BaseException) -> None:
        """End the requests of the failed step (running or just admitted); waiting ones stay."""
        with self._cv:
            waiting = {id(r) for r in self._waiting}
            requests = [r for r in self._requests.values() if id(r) not in waiting]
        self._running = []
        self._partial = self._next = None
        self._tensors = None
        for request in requests:
            request.handle._finish(None, error)
        with self._cv:
            for request in requests:
                self._forget(request)

    # model steps -------------------------------------------------------------------------------------
    def _new_seqs(self, request: _Request) -> list[_Seq]:
        """The ``n`` completions of a request whose prompt is being cached now."""
        for i in range(request.params.n):
            text = (
                IncrementalText(self.tokenizer, request.params.stop, self._text_decoder)
                if request.needs_text
                else None
            )
            request.seqs.append(
                _Seq(
                    request,
                    i,
                    make_generator(completion_seed(request.params.seed, i), self.runner.device),
                    text,
                    len(request.prompt),
                    matcher=request.matcher.deep_copy() if request.matcher is not None else None,
                )
            )
        request.unfinished = request.params.n
        return request.seqs

    def _join(self, logits: torch.Tensor, rows: list[int], seqs: list[_Seq]) -> None:
        """Add freshly prefilled completions to the batch; ``logits[rows[j]]`` is ``seqs[j]``'s."""
        if len(rows) != logits.shape[0] or rows != list(range(len(rows))):
            logits = logits[torch.tensor(rows, device=logits.device)]
        tensors = SamplingTensors.from_params([s.request.params for s in seqs], device=logits.device)
        # they are the running batch's when it was empty (its first decode step needs no rebuild)
        self._tensors = tensors if not self._running else None
        self._running.extend(seqs)
        self._sample_and_append(logits, seqs, tensors, decoded=False)

    def _generation(self) -> int:
        """The weights generation the next forward runs under; the prefix cache forgets what other
        weights computed."""
        generation = self.runner.weights_generation()
        if self.prefix_cache is not None:
            self.prefix_cache.forget_other_weights(generation)
        return generation

    def _restore(self, request: _Request, slot: int, generation: int) -> int:
        """Begin ``request`` under the weights ``generation`` (``_generation()``): copy the prefix taken
        for it at admission (if those weights computed it) into ``slot``; the positions restored (0:
        none)."""
        request.generation = generation
        self.prompt_tokens += len(request.prompt)
        entry, request.prefix = request.prefix, None
        if entry is None or entry.generation != request.generation:
            return 0
        n = entry.usable(len(request.prompt))
        self.runner.ensure_capacity(len(request.prompt))
        self.runner.write_slot(slot, entry.kv, n)
        self.cached_prompt_tokens += n
        return n

    def _prefill(self, admitted: list[_Request]) -> None:
        base = len(self._running)
        slots, rows, seqs = [], [], []
        for r, request in enumerate(admitted):
            slots.append(base + len(seqs))
            seqs += self._new_seqs(request)
            rows += [r] * request.params.n
        generation = self._generation()
        starts = [self._restore(r, slot, generation) for r, slot in zip(admitted, slots, strict=True)]
        fresh = [i for i, start in enumerate(starts) if start == 0]
        if len(fresh) == len(admitted):
            logits = self.runner.prefill(slots, [request.prompt for request in admitted])
        else:  # the rest of each prompt after its restored prefix; whole prompts beside them
            hits = [i for i, start in enumerate(starts) if start > 0]
            rests = [admitted[i].prompt[starts[i] :] for i in hits]
            # rows are padded to the longest rest: past the context, each row runs alone
            together = max(starts) + max(len(r) for r in rests) <= self.runner.max_model_len
            groups = [list(range(len(hits)))] if together else [[j] for j in range(len(hits))]
            continued = torch.cat(
                [
                    self.runner.extend(
                        [rests[j] for j in group],
                        [starts[hits[j]] for j in group],
                        [slots[hits[j]] for j in group],
                    )
                    for group in groups
                ]
            )
            logits = continued.new_empty((len(admitted), continued.shape[-1]))
            logits[torch.tensor(hits, device=logits.device)] = continued
            if fresh:
                whole = self.runner.prefill([slots[i] for i in fresh], [admitted[i].prompt for i in fresh])
                logits[torch.tensor(fresh, device=logits.device)] = whole
        for request, slot in zip(admitted, slots, strict=True):  # the prompt's cache into its other slots
            n = request.params.n
            if n > 1:  # one copy per layer for them all (64 completions: 0.1 ms less than one each)
                self.runner.copy_slots([slot] * (n - 1), list(range(slot + 1, slot + n)), len(request.prompt))
        self._join(logits, rows, seqs)

    def _prefill_chunk(self) -> None:
        """The next chunk of the long prompt; after its last, its completions join the batch."""
        partial, chunk = self._partial, self.prefill_chunk_tokens
        assert partial is not None and chunk is not None
        self._begin(partial)
        last = partial.next_len(chunk)
        logits = partial.step(self.runner, chunk)
        if logits is None:
            return
        request = partial.request
        # below every reserved slot (the next long prompt's too): the batch never grows into them
        base = len(self._running)
        for i in range(request.params.n):
            if base + i != partial.slot:
                self.runner.copy_slot(partial.slot, base + i, len(request.prompt))
        self._join(logits, [0] * request.params.n, self._new_seqs(request))
        self._partial, self._next = self._next, None
        if self._partial is not None:  # the rest of this iteration's budget (its slot may be the one
            self._begin(self._partial)  # just copied out: it is free now)
            self._partial.step(self.runner, chunk - last)

    def _begin(self, partial: PartialPrefill) -> None:
        """Before a long prompt's first chunk: its cached prefix, if any, is where its chunks start."""
        if partial.request.generation < 0:
            partial.done = self._restore(partial.request, partial.slot, self._generation())

    @contextlib.contextmanager
    def _prefill_threads(self) -> Iterator[None]:
        """Run the enclosed prefill with ``prefill_threads`` intra-op threads."""
        threads = torch.get_num_threads()
        if self.prefill_threads is None or self.prefill_threads == threads:
            yield
            return
        torch.set_num_threads(self.prefill_threads)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def _decode(self) -> None:
        seqs = self._running
        device = self.runner.device
        tokens = torch.tensor([s.tokens[-1] for s in seqs], dtype=torch.long, device=device)
        positions = [s.cache_len for s in seqs]
        logits = self.runner.decode(
            tokens, torch.tensor(positions, device=device), max(positions), min(positions)
        )
        if self._tensors is None:
            self._tensors = SamplingTensors.from_params([s.request.params for s in seqs], device=device)
        self._sample_and_append(logits, seqs, self._tensors, decoded=True)

    def _sample_and_append(
        self, logits: torch.Tensor, seqs: list[_Seq], t: SamplingTensors, decoded: bool
    ) -> None:
        history = None
        if t.any_penalty:
            history = [
                s.request.prompt + s.tokens if s.request.params.repetition_penalty != 1.0 else None
                for s in seqs
            ]
        outputs = [s.tokens for s in seqs] if t.any_output_penalty else None
        allowed = allowed_tokens([s.matcher for s in seqs], logits.shape[-1], logits.device)
        processed = process_logits(logits, t, history, outputs, allowed)
        generators = None if t.all_greedy else [s.generator for s in seqs]
        tokens = sample(processed, t, generators, self.generator)
        if decoded:
            for seq in seqs:
                seq.cache_len += 1
        if not t.any_logprobs:
            for seq, token in zip(seqs, tokens.tolist(), strict=True):
                self._append(seq, token, None, None)
            return
        source = logits if self.logprobs_mode == "raw" else processed
        chosen, top_values, top_ids = logprobs_and_top(source, tokens, t.max_top_logprobs)
        logprobs = chosen.tolist()
        values = top_values.tolist() if top_values is not None else None
        ids = top_ids.tolist() if top_ids is not None else None
        for row, (seq, token) in enumerate(zip(seqs, tokens.tolist(), strict=True)):
            k = seq.request.params.top_logprobs if seq.request.params.logprobs else 0
            top = dict(zip(ids[row][:k], values[row][:k], strict=True)) if k and ids and values else None
            self._append(seq, token, logprobs[row], top)

    def _append(self, seq: _Seq, token: int, logprob: float | None, top: dict[int, float] | None) -> None:
        request = seq.request
        seq.tokens.append(token)
        if request.params.logprobs:
            seq.logprobs.append(logprob)  # type: ignore[arg-type]
            if top is not None:
                seq.top_logprobs.append(top)
        reason = None
        grammar_done = dead_end = False
        if seq.matcher is not None:
            seq.matcher.consume_token(token)
            # an error: no token could continue the grammar (a vocabulary's dead end, structured.py)
            dead_end = seq.matcher.is_error()
            grammar_done = seq.matcher.is_stopped() and not dead_end
            if grammar_done and token not in request.stop_ids and seq.text is not None:
                seq.text.push(token)  # the grammar's last token is part of the text
        if dead_end:
            reason = "length"
        elif token in request.stop_ids or grammar_done:
            reason = "stop"
        elif seq.text is not None and seq.text.push(token):
            reason = "stop"
        elif len(seq.tokens) >= request.limit:
            reason = "length"
        if reason is not None:
            self._finish_seq(seq, reason)
        elif request.handle.stream:
            piece = seq.text.take() if seq.text is not None else ""
            p = request.params
            request.handle._emit(
                StreamDelta(
                    seq.index,
                    [token],
                    piece,
                    None,
                    [logprob] if p.logprobs else None,  # type: ignore[list-item]
                    [top] if p.logprobs and p.top_logprobs and top is not None else None,
                )
            )

    def _finish_seq(self, seq: _Seq, reason: str) -> None:
        request = seq.request
        seq.finish_reason = reason
        request.unfinished -= 1
        if request.handle.stream:
            assert seq.text is not None
            seq.text.finish()
            last = [seq.tokens[-1]] if seq.tokens and reason != "abort" else []
            p = request.params
            lp = seq.logprobs[-1:] if p.logprobs and last else None
            top = seq.top_logprobs[-1:] if p.logprobs and p.top_logprobs and last else None
            request.handle._emit(StreamDelta(seq.index, last, seq.text.take(final=True), reason, lp, top))
        seq.completion = self._completion(seq)  # reported now (add_completion_callback), kept for the output
        request.handle._completion_finished(seq.index, seq.completion)
        if request.unfinished == 0:
            self._complete(request)

    def _completion(self, seq: _Seq) -> Completion:
        request = seq.request
        if seq.text is not None:
            seq.text.finish()
            text = seq.text.text
        else:
            ids = seq.tokens[:-1] if seq.tokens and seq.tokens[-1] in request.stop_ids else seq.tokens
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(
            token_ids=list(seq.tokens),
            text=text,
            finish_reason=seq.finish_reason or "abort",
            logprobs=list(seq.logprobs) if request.params.logprobs else None,
            top_logprobs=list(seq.top_logprobs)
            if request.params.logprobs and request.params.top_logprobs
            else None,
        )

    def _complete(self, request: _Request) -> None:
        completions = [seq.completion or self._completion(seq) for seq in request.seqs]
        request.handle._finish(RequestOutput(list(request.prompt), completions))
        with self._cv:
            self._forget(request)

    def _retire(self) -> None:
        """Remove finished completions, moving the last running ones into the freed slots."""
        running = self._running
        if all(s.finish_reason is None for s in running):
            return
        if self.prefix_cache is not None:
            for slot, seq in enumerate(running):
                self._keep_prefix(slot, seq)
        keep = [s for s in running if s.finish_reason is None]
        # fill each hole below len(keep) with a survivor from above it
        holes = [i for i in range(len(keep)) if running[i].finish_reason is not None]
        movers = [i for i in range(len(keep), len(running)) if running[i].finish_reason is None]
        packed = running[: len(keep)]
        order = list(range(len(keep)))  # the row each slot's completion had before
        for hole, src in zip(holes, movers, strict=True):
            self.runner.copy_slot(src, hole, running[src].cache_len)
            packed[hole] = running[src]
            order[hole] = src
        self._running = packed
        if self._tensors is not None and packed:  # the survivors' rows, not rebuilt from their params
            self._tensors = self._tensors.select(order, [s.request.params for s in packed])
        else:
            self._tensors = None

    def _keep_prefix(self, slot: int, seq: _Seq) -> None:
        """Store a completion that finished (not aborted) in the prefix cache, if the weights that
        computed its keys and values are still the current ones."""
        request = seq.request
        if seq.finish_reason not in ("stop", "length") or request.generation != self.runner.generation:
            return
        assert self.prefix_cache is not None
        tokens = (request.prompt + seq.tokens)[: seq.cache_len]
        self.prefix_cache.put(tokens, self.runner.read_slot(slot, seq.cache_len), request.generation)
