"""GRPO's rollouts beside training: the producer thread's side of the GRPO trainer.

:class:`AsyncRollouts` is the part of :class:`toolbox.trainer.grpo.GRPOTrainer` that runs when
``trainer.max_staleness`` is set: it starts a :class:`toolbox.rl.producer.RolloutProducer` whose
thread calls the trainer's ``collect`` for rounds ahead, hands each update's weights to the thread,
takes each step's round with its wait times, and checks the settings. A :class:`Round` is one
round's scored rollout as generated (by the trainer itself or by the thread); a checkpoint holds
the queued ones. The schedule, staleness and resume guarantees are the producer's (its docstring)
and ``docs/post_training.md`` (Asynchronous GRPO).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.nn.adapters import is_adapted, merged_state_dict
from toolbox.rl.importance import IMPORTANCE_MODES, importance_weights
from toolbox.rl.producer import RolloutProducer
from toolbox.rl.rollouts import TextRollout


@dataclass
class Round:
    """One round's scored rollout, as generated (by the trainer itself or the producer thread).

    ``version``: the policy version (updates done) that generated it; ``drawn``: every prompt
    batch drawn for it (dynamic sampling draws several), for the ROLLOUT_END events; ``loader`` and
    ``reward_errors``: the loader position and reward error counts right after it was drawn, what
    a checkpoint holding the queued rounds restores.
    """

    index: int
    version: int
    rollout: TextRollout
    metrics: dict[str, float]
    rollout_time: float
    reward_time: float
    generated: float
    drawn: list[TextRollout] = field(default_factory=list)
    loader: dict[str, Any] = field(default_factory=dict)
    reward_errors: dict[str, int] = field(default_factory=dict)


class AsyncRollouts:
    """The producer-thread methods of the GRPO trainer (a mixin: it reads the trainer's policy,
    engine, step, ``max_staleness`` and ``collect``)."""

    producer: RolloutProducer[Round] | None
    _restored_rounds: list[Round]

    @classmethod
    def engine_on_copy(cls, settings: dict[str, Any]) -> bool:
        """With ``max_staleness`` >= 1 the engine generates while the policy trains: its own copy."""
        return bool(settings.get("max_staleness"))

    def _check_async(self, max_staleness: int | None, mode: str, cap: float) -> None:
        if max_staleness is not None and max_staleness < 0:
            raise ConfigError(
                f"trainer.max_staleness: {max_staleness}; set null (no producer thread) or >= 0."
            )
        if max_staleness is not None and not self.seed_sampling:
            raise ConfigError(
                "trainer.max_staleness needs trainer.seed_sampling=true (a thread's draws must not "
                "depend on the global random state); set it or max_staleness=null."
            )
        if max_staleness and self.shared_engine:
            raise ConfigError(
                "trainer.max_staleness >= 1 needs an engine on its own copy of the policy, but the "
                "engine shares it; build the trainer through ExperimentBuilder (it copies the policy)."
            )
        if mode not in IMPORTANCE_MODES:
            raise ConfigError(
                f"trainer.importance_sampling_mode: {mode!r}; choose one of {', '.join(IMPORTANCE_MODES)}."
            )
        if cap <= 0:
            raise ConfigError(f"trainer.importance_sampling_cap: {cap}; it must be > 0 (TRL's default: 3.0).")

    def _produce(self, round_index: int, version: int) -> Round:
        """``collect`` in the producer thread (with the trainer's intra-op thread count)."""
        torch.set_num_threads(self._threads)
        return self.collect(round_index, version)

    def _next_round(self) -> tuple[Round, dict[str, float]]:
        """This step's round: generated here, or taken from the producer (with its wait times)."""
        if self.producer is None:
            return self.collect(self.step, self.step), {}
        snapshot = 0.0
        if self.max_staleness == 0 and self.step > self.producer.start:
            # lockstep: the policy goes to the thread only now, so that it never generates while
            # the trainer evaluates or saves between two steps (an engine sharing the policy)
            ts = time.perf_counter()
            self._publish(self.step)
            snapshot = time.perf_counter() - ts
        rnd, trainer_wait, producer_wait = self.producer.take(self.step)
        return rnd, {
            "async/staleness": float(self.step - rnd.version),
            "async/trainer_wait_s": trainer_wait,
            "async/producer_wait_s": producer_wait,
            "async/snapshot_s": snapshot,
        }

    def weights_snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the policy's weights as the engine loads them (merged for an adapted policy)."""
        if is_adapted(self.policy):
            return {k: v.detach().clone() for k, v in merged_state_dict(self.policy).items()}
        return {n: p.detach().clone() for n, p in self.policy.named_parameters()}

    def _publish(self, version: int) -> None:
        """The policy after ``version`` updates, for the rounds generated with it."""
        if not self.producer.needs(version):
            return
        self.producer.publish(version, None if self.shared_engine else self.weights_snapshot())

    def _load_engine_weights(self, snapshot: dict[str, torch.Tensor] | None) -> None:
        if snapshot is None:  # an engine sharing the policy: it only refreshes derived copies
            self.engine.weights_updated()
        else:
            self.engine.update_weights(snapshot)

    def start_producer(self) -> None:
        """Start the rollout thread at the current step (with the rounds a checkpoint held)."""
        try:
            self.producer = RolloutProducer(
                self._produce,
                self._load_engine_weights,
                max_staleness=self.max_staleness,
                start=self.step,
                end=self.max_steps,
                queued=self._restored_rounds,
            )
        except ValueError as e:
            raise ConfigError(
                f"trainer.max_staleness: {e}; resume with the max_staleness it was saved with."
            ) from None
        self._restored_rounds = []

    def stop_producer(self) -> None:
        if self.producer is not None:
            self.producer.close()
            self.producer = None

    def _is_weights(
        self, micro: TextRollout, logps: torch.Tensor, stats: dict[str, list[float]]
    ) -> torch.Tensor:
        """Truncated importance weights π_old/π_sampler of a micro-batch (π_old: the old log-probs,
        or this forward's when the round has one update, which are the same numbers)."""
        if micro.sampling_logprobs is None:
            raise ConfigError(
                "trainer.importance_sampling_correction needs the engine's sampling log-probs, but "
                "the engine reported none; use an engine that reports logprobs (torch, vllm)."
            )
        old = micro.old_logprobs if micro.old_logprobs is not None else logps.detach()
        weights, batch_stats = importance_weights(
            old.float(), micro.sampling_logprobs, micro.completion_mask, self.is_mode, self.is_cap
        )
        for k, v in batch_stats.items():
            stats[k].append(v)
        return weights

    def async_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint holds with the thread running: the rounds ``step .. step + k − 1`` it
        queued and, since it draws ahead, the loader position and reward errors after the last."""
        queued = self.producer.queued(self.step)
        last = queued[-1] if queued else self._last_round
        if last is None:
            return state
        return {
            "loader": dict(last.loader),
            "reward_errors": dict(last.reward_errors),
            "async": {"max_staleness": self.max_staleness, "rounds": queued},
        }

    def restore_rounds(self, saved: dict[str, Any] | None) -> None:
        """The queued rounds of a checkpoint (``async_state``), for the producer to start with."""
        if saved is not None and saved["rounds"] and saved["max_staleness"] != self.max_staleness:
            raise ConfigError(
                f"trainer.max_staleness: {self.max_staleness}, but the checkpoint holds rounds "
                f"generated with max_staleness={saved['max_staleness']}; resume with that value."
            )
        self._restored_rounds = list(saved["rounds"]) if saved is not None else []
        device = self.strategy.device  # a checkpoint loads on the CPU
        for rnd in self._restored_rounds:
            rnd.rollout = rnd.rollout.to(device)
            rnd.drawn = [r.to(device) for r in rnd.drawn]
