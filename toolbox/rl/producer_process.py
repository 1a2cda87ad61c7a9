"""Rollouts beside training in a child process: the producer thread's schedule, without the GIL.

:class:`toolbox.rl.producer.RolloutProducer` generates the rounds ahead in a thread of the
trainer's process. On a small model both sides are mostly Python dispatch (the engine's decode
loop, autograd's op calls), which one interpreter lock serialises: measured on grpo_arith's model
(2 cores, one torch thread each), the thread made the update 1.9x and the rollout 2.3x slower than
alone, and the run slower than the synchronous one. :class:`ProcessProducer` keeps the thread's
contract and schedule (round ``r`` generated with policy version ``max(r − k, 0)``; the same
``publish`` / ``take`` / ``queued`` / ``close``), but generates in a spawned child process::

    producer = ProcessProducer(make_worker, weights, max_staleness=1, start=0, end=100)
    for step in range(100):
        item, waited, _ = producer.take(step)   # round ``step``, generated in the child
        ...update on item...                    # meanwhile the child generates round step + 1
        producer.publish(step + 1, snapshot)    # sent to the child (tensors in shared memory)
    producer.close()

``make_worker`` is a picklable callable run once in the child; it returns ``(produce,
load_weights)`` with the thread producer's meaning (``produce(round, version) -> item``,
``load_weights(snapshot)``). It builds the child's own engine, prompt loader and rewards from the
run's config, starting where the trainer's stood, so that the child draws exactly what a thread
would have drawn: the same rounds, bit for bit (``tests/rl/test_producer_process.py``). ``weights``
is the policy as the trainer holds it at ``start`` (the child built its copy from the config, which
a resumed run has moved on from). Weights and rounds cross in ``torch.multiprocessing`` queues
(tensors in shared memory, not pickled copies).
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar

import torch
import torch.multiprocessing as mp

from toolbox.rl.producer import ProducerError

T = TypeVar("T")

ProducerKind = Literal["thread", "process"]  # trainer.producer: where the rounds ahead are generated

_STOP = None  # on the weights queue: stop after the round in progress


class _ParentGone(Exception):
    pass


def _get(weights: mp.Queue, parent: int) -> Any:
    """The next message from the parent; raises ``_ParentGone`` once the parent has died (a
    SIGKILLed trainer cannot stop its daemon child: it must notice by itself)."""
    while True:
        try:
            return weights.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                raise _ParentGone from None


def _child(
    make_worker: Callable[[], tuple[Callable[[int, int], Any], Callable[[Any], None]]],
    threads: int,
    max_staleness: int,
    first: int,
    end: int,
    weights: mp.Queue,
    rounds: mp.Queue,
    parent: int,
) -> None:
    """The child's loop: rounds ``first .. end − 1``, each after loading the version it needs."""
    try:
        torch.set_num_threads(threads)
        produce, load_weights = make_worker()
        loaded = None
        for r in range(first, end):
            version = max(r - max_staleness, 0)
            t = time.perf_counter()
            while loaded is None or loaded < version:  # versions arrive in order; older are skipped
                message = _get(weights, parent)
                if message is _STOP:
                    return
                got, snapshot = message
                if got >= version or loaded is None:
                    load_weights(snapshot)
                    loaded = got
            waited = time.perf_counter() - t
            rounds.put(("round", r, produce(r, version), waited))
        while _get(weights, parent) is not _STOP:  # the parent receives a round's tensors from
            pass  # this process's resource sharer: stay until it says stop
    except _ParentGone:
        return
    except BaseException:  # the trainer re-raises it at its next take/queued
        rounds.put(("error", traceback.format_exc()))


class ProcessProducer(Generic[T]):
    """Generates rounds ``start + len(queued) .. end − 1`` in a child process (module docstring).

    Args:
        make_worker: picklable; in the child, returns ``(produce, load_weights)``.
        weights: the policy's weights at ``start`` (what ``load_weights`` takes), sent first.
        max_staleness: k, how many updates a round's policy may lag behind the update using it.
        start: the step the trainer starts at.
        end: one past the last round (the trainer's max_steps).
        queued: rounds ``start ..`` already generated (restored from a checkpoint).
        threads: the child's torch intra-op threads.
    """

    def __init__(
        self,
        make_worker: Callable[[], Any],
        weights: Any,
        max_staleness: int,
        start: int,
        end: int,
        queued: Sequence[T] = (),
        threads: int = 1,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness: {max_staleness}; it must be >= 0")
        expected = min(max_staleness, max(end - start, 0)) if start > 0 else 0
        if len(queued) < expected:
            raise ValueError(
                f"{len(queued)} queued rounds at step {start}; max_staleness={max_staleness} needs "
                f"{expected} (rounds generated by policies that no longer exist)"
            )
        self.max_staleness = max_staleness
        self.start = start
        self.end = end
        self._ready: dict[int, T] = {start + i: item for i, item in enumerate(queued[:expected])}
        self._waited: dict[int, float] = dict.fromkeys(self._ready, 0.0)
        context = mp.get_context("spawn")  # a fork would copy the trainer's threads' locks
        self._weights = context.Queue()
        self._rounds = context.Queue()
        self._weights.put((start, weights))
        self._process = context.Process(
            target=_child,
            args=(
                make_worker,
                threads,
                max_staleness,
                start + len(self._ready),
                end,
                self._weights,
                self._rounds,
                os.getpid(),
            ),
            name="rollout-producer",
            daemon=True,
        )
        self._process.start()
        self._closed = False

    # the schedule (as RolloutProducer's) -----------------------------------------------------------
    def version_for(self, round_index: int) -> int:
        return max(round_index - self.max_staleness, 0)

    def needs(self, version: int) -> bool:
        return version + self.max_staleness < self.end

    # the trainer's side -----------------------------------------------------------------------------
    def publish(self, version: int, snapshot: Any) -> None:
        """The policy after ``version`` updates, sent to the child for the rounds using it."""
        self._weights.put((version, snapshot))

    def take(self, round_index: int) -> tuple[T, float, float]:
        """Round ``round_index`` (blocking until the child sent it), the seconds this call waited
        and the seconds the child waited for the weights it was generated with."""
        if round_index < self.start or round_index >= self.end:
            raise ValueError(f"round {round_index} is outside {self.start} .. {self.end - 1}")
        t = time.perf_counter()
        self._receive_until(lambda: round_index in self._ready)
        return self._ready.pop(round_index), time.perf_counter() - t, self._waited.pop(round_index, 0.0)

    def queued(self, step: int) -> list[T]:
        """Rounds ``step .. step + k − 1`` (waiting until they arrive): what a checkpoint after
        ``step`` updates holds."""
        rounds = range(step, min(step + self.max_staleness, self.end))
        self._receive_until(lambda: all(r in self._ready for r in rounds))
        return [self._ready[r] for r in rounds]

    def close(self) -> None:
        """Stop the child after the round in progress (idempotent); killed if it does not stop."""
        if self._closed:
            return
        self._closed = True
        self._weights.put(_STOP)
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        for q in (self._weights, self._rounds):
            q.cancel_join_thread()
            q.close()

    def _receive_until(self, done: Callable[[], bool]) -> None:
        while not done():
            if self._closed:
                raise ProducerError("the rollout producer was closed")
            try:
                message = self._rounds.get(timeout=1.0)
            except queue.Empty:
                if not self._process.is_alive():
                    raise ProducerError(
                        f"the rollout process exited (code {self._process.exitcode}) without sending "
                        "a round; see its output above"
                    ) from None
                continue
            if message[0] == "error":
                raise ProducerError(f"the rollout process failed:\n{message[1]}")
            _, r, item, waited = message
            self._ready[r] = item
            self._waited[r] = waited
