"""The GRPO trainer: sample completions through an ``InferenceEngine``, score them, update the policy.

One ``train_step`` is one rollout round::

    prompts   ``prompts_per_step`` examples from the shuffled training set (position checkpointed)
    rollout   ``num_generations`` completions per prompt through the engine (temperature, top_p,
              top_k, ``max_completion_length``); a completion cut by the length limit gets no
              gradient when ``mask_truncated_completions``
    rewards   the weighted sum of the ``rewards`` components (REWARDS specs); a component that
              raises is logged with its name and handled by ``reward_on_error`` (skip/zero/raise)
    advantage the ``advantage`` estimator (ADVANTAGES: group_norm, rloo, reinforce_pp) per group
    update    ``ppo_epochs`` × minibatches of ``minibatch_size`` rows, one optimizer step each, the
              objective's clipped loss against the old log-probs (computed once per round, and only
              when there is more than one update per round) and, when the objective's beta > 0, the
              frozen reference's log-probs (computed once per round, without grad, as part of the
              round's collection: with ``max_staleness`` >= 1 the producer thread computes them
              beside the update, on the other core)
    sync      the engine sees the new weights: the default torch engine shares the policy's parameters
              (nothing is copied); any other engine gets ``update_weights`` after each optimizer step

With ``max_staleness`` set, rollouts are generated beside training (``toolbox.rl.producer``): a
thread generates rounds t+1 .. t+k with an engine on its own copy of the policy while the trainer
updates on round t, round r always with the policy after r − k updates (k = 0: the synchronous
algorithm, bit for bit); ``importance_sampling_correction`` weights each token's loss by the
truncated ratio π_old/π_sampler of the engine's sampling log-probs (``toolbox.rl.importance``).
Both are described in ``docs/post_training.md`` (Asynchronous GRPO).

One step's files, in order: ``data/loader.py`` · ``rl/rollouts.py`` → ``serving/engine.py`` →
``serving/engines/torch/engine.py`` (``runner.py``, ``scheduler.py``) · ``rewards/composite.py`` ·
``rl/advantages.py`` (``rl/dynamic_sampling.py``) · ``objectives/logprobs.py`` → ``objectives/policy.py``
→ ``trainer/base.py`` (``optimizer_step``) · ``trainer/callbacks/``. The scheduler steps once per round. With ``max_staleness``:
``trainer/grpo_async.py`` → ``rl/producer.py``, and ``rl/importance.py`` in the update.
Metrics: per reward component mean/std/errors, reward mean/std, KL to the reference, clip fractions,
entropy, completion lengths, timings, rollout tokens/s (``sampling/*``: dynamic sampling).

Why this file is longer than ~400 lines: it is one class whose constructor checks some thirty
settings that interact (generations vs minibatches, the reference vs beta, the engine vs the
policy) and whose ``train_step`` is one round's update; both read best whole. The parts that stand
alone live apart: the producer thread's side in ``trainer/grpo_async.py``, the rollouts, rewards,
advantages, importance weights and losses in ``rl/``, ``rewards/`` and ``objectives/``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from toolbox.core.bounds import AtLeastOne, Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat
from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.core.registries import ADVANTAGES, TRAINERS
from toolbox.data.loader import BatchLoader
from toolbox.nn.adapters import is_adapted, merged_state_dict
from toolbox.nn.llama_training import training_forward
from toolbox.objectives.base import PolicyObjective
from toolbox.objectives.logprobs import token_logprobs
from toolbox.objectives.policy import PolicyBatch
from toolbox.rewards.composite import CompositeReward
from toolbox.rl.advantages import GroupEstimator
from toolbox.rl.dynamic_sampling import fill_informative
from toolbox.rl.importance import ImportanceMode
from toolbox.rl.rollouts import TextRollout
from toolbox.serving.engine import SamplingParams
from toolbox.trainer.base import BaseTrainer
from toolbox.trainer.grpo_async import AsyncRollouts, Round

if TYPE_CHECKING:
    from toolbox.experiment.build import Components

log = logging.getLogger(__name__)

DEFAULT_REWARDS = {"correct": {"name": "numeric_match"}}


def _as_examples(examples: list[Any]) -> list[Any]:
    """The loader's collate: a round's examples stay a list of dicts."""
    return examples


@TRAINERS.register("grpo")
class GRPOTrainer(AsyncRollouts, BaseTrainer):
    """Group-relative policy optimisation over prompts of the training set (see the module docstring).

    Args:
        max_steps: rollout rounds to train for (each has ppo_epochs × minibatches optimizer steps).
        prompts_per_step: prompts sampled per round.
        num_generations: completions per prompt (the group of the advantage).
        max_completion_length: most tokens generated per completion.
        temperature: sampling temperature (the log-probs of the update use the same).
        top_p: nucleus sampling threshold.
        top_k: keep the k most likely tokens (0: all).
        ppo_epochs: passes over each round's completions (TRL's num_iterations).
        minibatch_size: completions per optimizer step (null: all of the round's, one step per epoch).
        micro_batch_size: completions per forward/backward inside a minibatch (null: the minibatch).
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        activation_checkpointing: recompute each layer's activations in the backward pass instead
            of storing them (Hugging Face models): less memory for about one more forward.
        eval_every: run the evaluators every this many rounds (0: only at the end).
        save_every: save a checkpoint every this many rounds (0: only at the end).
        shuffle: visit the prompts in a seeded random order each epoch.
        rewards: label -> reward spec (a REWARDS ``name`` plus its settings and an optional
            ``weight``); the reward of a completion is the weighted sum of the components.
        reward_on_error: what a raising reward component gives the batch: skip (None, left out of
            the sum), zero or raise.
        advantage: the ADVANTAGES spec (group_norm with scale group/batch/none, rloo, reinforce_pp).
        mask_truncated_completions: completions that hit max_completion_length get no gradient.
        reference_path: a saved causal LM as the KL reference (null: a frozen copy of the policy as
            built); only loaded when the objective's beta > 0.
        prompt_field: the record field holding the prompt text (passed to the rewards).
        seed_sampling: seed each prompt's sampling from (run seed, round, prompt), so a resumed run
            draws the same completions as an uninterrupted one.
        dynamic_sampling: DAPO's dynamic sampling (toolbox.rl.dynamic_sampling): train each round
            on groups whose rewards differ, drawing further prompts to fill ``prompts_per_step``.
        max_sampling_draws: the most prompt batches a round draws with dynamic_sampling.
        max_staleness: generate rollouts beside training (``toolbox.rl.producer``): round r is
            generated with the policy after r − max_staleness updates while the trainer updates
            on earlier rounds (null: in the training loop, as always; 0: in the producer thread,
            the same numbers bit for bit; >= 1: overlapped, with an engine on a copy of the policy).
        forward: how a Hugging Face Llama-layout policy and reference compute the completions'
            log-probs: ``model`` (their own forward), ``lean`` (``toolbox.nn.llama_training``: the
            same function with fewer ops, the last layer only at the completion positions; equal
            up to float rounding; left-padded rows through a mask that keeps each query to the
            real tokens up to it) or ``exact`` (leaner, bitwise the model's; left-padded batches
            use the model's forward). Other models always use their own forward.
        importance_sampling_correction: weight each token's loss by π_old/π_sampler from the
            engine's sampling log-probs, truncated (TRL's vllm_importance_sampling_correction).
        importance_sampling_mode: token_truncate, token_mask, sequence_truncate or sequence_mask
            (``toolbox.rl.importance``).
        importance_sampling_cap: the truncation (or masking) threshold of the ratio.
    """

    objective_family = PolicyObjective
    uses_reference = True
    uses_engine = True

    def __init__(
        self,
        parts: Components,
        max_steps: AtLeastOne = 100,
        prompts_per_step: AtLeastOne = 8,
        num_generations: AtLeastOne = 4,
        max_completion_length: AtLeastOne = 16,
        temperature: PositiveFloat = 1.0,
        top_p: Fraction = 1.0,
        top_k: NonNegativeInt = 0,
        ppo_epochs: AtLeastOne = 1,
        minibatch_size: AtLeastOne | None = None,
        micro_batch_size: AtLeastOne | None = None,
        max_grad_norm: NonNegativeFloat = 1.0,
        eval_every: NonNegativeInt = 0,
        save_every: NonNegativeInt = 0,
        shuffle: bool = True,
        rewards: dict[str, Any] | None = None,
        reward_on_error: Literal["skip", "zero", "raise"] = "skip",
        advantage: dict[str, Any] | None = None,
        mask_truncated_completions: bool = False,
        reference_path: str | None = None,
        prompt_field: str = "prompt",
        seed_sampling: bool = True,
        activation_checkpointing: bool = False,
        dynamic_sampling: bool = False,
        max_sampling_draws: AtLeastOne = 4,
        max_staleness: NonNegativeInt | None = None,
        forward: Literal["lean", "exact", "model"] = "model",
        importance_sampling_correction: bool = False,
        importance_sampling_mode: ImportanceMode = "token_truncate",
        importance_sampling_cap: PositiveFloat = 3.0,
    ) -> None:
        super().__init__(
            parts,
            max_steps=max_steps,
            eval_every=eval_every,
            save_every=save_every,
            max_grad_norm=max_grad_norm,
            activation_checkpointing=activation_checkpointing,
        )
        rows = prompts_per_step * num_generations
        if min(prompts_per_step, num_generations, max_completion_length, ppo_epochs, max_sampling_draws) < 1:
            raise ConfigError(
                "trainer: prompts_per_step, num_generations, max_completion_length, ppo_epochs and "
                "max_sampling_draws must be >= 1."
            )
        if temperature <= 0:
            raise ConfigError(f"trainer.temperature: {temperature}; GRPO samples, so it must be > 0.")
        self.minibatch_size = minibatch_size or rows
        if not 1 <= self.minibatch_size <= rows:
            raise ConfigError(
                f"trainer.minibatch_size: {minibatch_size}; choose 1 .. prompts_per_step × num_generations = {rows}."
            )
        self.micro_batch_size = min(micro_batch_size or self.minibatch_size, self.minibatch_size)
        self.prompts_per_step = prompts_per_step
        self.num_generations = num_generations
        self.max_completion_length = max_completion_length
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.ppo_epochs = ppo_epochs
        self.mask_truncated = mask_truncated_completions
        self.prompt_field = prompt_field
        self.seed_sampling = seed_sampling
        self.dynamic_sampling = dynamic_sampling
        self.max_sampling_draws = max_sampling_draws
        self.reward = CompositeReward(rewards or DEFAULT_REWARDS, on_error=reward_on_error)
        self.advantage = ADVANTAGES.build(advantage or {"name": "group_norm"}, "trainer.advantage")
        if not isinstance(self.advantage, GroupEstimator):
            raise ConfigError("trainer.advantage: choose a group estimator (group_norm, rloo, reinforce_pp).")
        ctx = self.context
        self.loader = BatchLoader(
            parts.train_data,
            prompts_per_step,
            _as_examples,
            seed=ctx.seed,
            shuffle=shuffle,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        self.policy = self.strategy.unwrap(self.model)
        self.engine = parts.engine  # built by the ExperimentBuilder on the policy (uses_engine)
        self.shared_engine = self.engine is not None and self.engine.shares_model(self.policy)
        self.needs_reference = self.objective.needs_reference
        self.reference = parts.reference_model if self.needs_reference else None  # (uses_reference)
        # what computes the log-probs: the lean forward where one covers the model, else the model
        lean = forward != "model"
        self._policy_forward = (
            training_forward(self.model, exact=forward == "exact") if lean else None
        ) or self.model
        self._reference_forward = (
            training_forward(self.reference, exact=forward == "exact")
            if lean and self.reference is not None
            else None
        ) or self.reference
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._check_async(max_staleness, importance_sampling_mode, importance_sampling_cap)
        mode = getattr(getattr(self.engine, "batcher", None), "logprobs_mode", None)
        if importance_sampling_correction and mode == "raw" and temperature != 1.0:
            raise ConfigError(
                f"trainer.importance_sampling_correction at temperature {temperature} needs the "
                "engine's log-probs of the sampled distribution; set engine.logprobs_mode=processed."
            )
        self.max_staleness = max_staleness
        self.is_correction = importance_sampling_correction
        self.is_mode = importance_sampling_mode
        self.is_cap = importance_sampling_cap
        self.producer = None
        self._restored_rounds: list[Round] = []
        self._last_round: Round | None = None
        self._threads = torch.get_num_threads()

    @classmethod
    def default_engine(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """Without an ``engine`` node: the torch engine on the policy, one slot per rollout row
        (reporting the log-probs of the temperature-scaled distribution when they correct the loss),
        without a prefix cache: every round's rollouts follow an update, and the cache forgets what
        other weights computed, so storing each finished completion's keys and values would only
        cost (2.5 ms of a 55 ms step at the tiny size of benchmarks/grpo_vs_trl.py)."""
        spec = {
            "name": "torch",
            "max_batch_size": settings["prompts_per_step"] * settings["num_generations"],
            "prefix_cache_gib": 0.0,
        }
        if settings.get("importance_sampling_correction"):
            spec["logprobs_mode"] = "processed"
        return spec

    # one round ------------------------------------------------------------------------------------
    def _prompt_ids(self, example: dict[str, Any]) -> list[int]:
        if "prompt_ids" in example:
            return [int(t) for t in example["prompt_ids"]]
        text = example[self.prompt_field]
        return [self.tokenizer.bos_token_id, *self.tokenizer.encode(text, add_special_tokens=False)]

    def round_seed(self, round_index: int, draw: int = 0) -> int:
        """The sampling seed of a round's ``draw`` (draw > 0: dynamic sampling's further draws)."""
        seed = (self.context.seed * 1_000_003 + round_index * 10_007) % 2**62
        return (seed ^ (draw * 0x9E3779B97F4A7C15)) % 2**62 if draw else seed

    def generation_mode(self) -> contextlib.AbstractContextManager[Any]:
        """The policy in eval mode while an engine sharing it generates through its modules (a copy
        needs nothing, nor an engine whose forward never reads the modules' mode: the torch
        engine's, ``TorchEngine.mode_independent``; the two walks over the modules cost 0.2 ms a round)."""
        if self.shared_engine and not getattr(self.engine, "mode_independent", False):
            return self.eval_mode(self.policy)
        return contextlib.nullcontext()

    @torch.no_grad()
    def rollout(
        self, examples: list[dict[str, Any]], draw: int = 0, round_index: int | None = None
    ) -> TextRollout:
        """Sample ``num_generations`` completions per example and build the rollout (no rewards yet);
        ``draw`` > 0 is a further draw of the same round (dynamic sampling), seeded apart;
        ``round_index``: the round it is for (default: the current step)."""
        base = SamplingParams(
            max_tokens=self.max_completion_length,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            n=self.num_generations,
            logprobs=self.is_correction,
        )
        prompt_ids = [self._prompt_ids(ex) for ex in examples]
        round_seed = self.round_seed(self.step if round_index is None else round_index, draw)
        with self.generation_mode():
            if self.seed_sampling and self.engine.supports_submit:
                # one request per prompt, each with its own seed, all joining the same engine step:
                # submitted one by one, the engine thread could start the first before the others
                # arrive, and the batch's rows (so the sampling log-probs, at the float rounding)
                # would depend on thread timing, which an async run's resume cannot reproduce
                requests = [(ids, replace(base, seed=round_seed + i)) for i, ids in enumerate(prompt_ids)]
                handles = self.engine.submit_requests(requests, stream=False, queue_limit=False)
                results = [h.result() for h in handles]
            else:
                results = self.engine.generate(
                    prompt_ids, replace(base, seed=round_seed) if self.seed_sampling else base
                )
        keys = [k for k in examples[0] if k not in ("prompt_ids",)]
        fields = {k: [ex.get(k) for ex in examples] for k in keys}
        return TextRollout.from_outputs(
            results,
            [ex.get(self.prompt_field) for ex in examples],
            fields,
            pad_token_id=self.pad_token_id,
            num_generations=self.num_generations,
            mask_truncated=self.mask_truncated,
            device=self.strategy.device,
        )

    def score(self, rollout: TextRollout) -> dict[str, float]:
        """Fill ``rewards``, ``rewards_per_func`` and ``advantages``; return the reward metrics."""
        fields = {k: v for k, v in rollout.fields.items() if k != self.prompt_field}
        result = self.reward.score(rollout.prompts, rollout.completions, **fields)
        rollout.rewards = result.total.to(rollout.completion_ids.device)
        rollout.rewards_per_func = result.per_component
        rollout.advantages = self.advantage(rollout.rewards.cpu(), rollout.num_generations).to(
            rollout.rewards.device
        )
        return result.metrics

    def _logps(
        self, model: Any, mb: TextRollout, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return token_logprobs(
            model,
            mb.input_ids,
            mb.attention_mask,
            logits_to_keep=mb.completion_width,
            with_entropy=with_entropy,
            temperature=self.temperature,
        )

    @torch.no_grad()
    def _fill_logps(self, model: Any, rollout: TextRollout, field: str) -> None:
        """``rollout.<field>``: ``model``'s log-probs of the completions, micro-batch by micro-batch."""
        logps = []
        for start in range(0, len(rollout), self.micro_batch_size):
            mb = rollout.select(range(start, min(start + self.micro_batch_size, len(rollout))))
            logps.append(self._logps(model, mb, False)[0])
        setattr(rollout, field, torch.cat(logps))

    def _draw(
        self, draw: int, times: list[float], round_index: int, drawn: list[TextRollout]
    ) -> tuple[TextRollout, dict[str, float]]:
        """A prompt batch sampled and scored; ``times`` += rollout s, reward s, generated tokens."""
        t = time.perf_counter()
        rollout = self.rollout(self.loader.next_batch(), draw, round_index)
        times[0] += time.perf_counter() - t
        times[2] += float(rollout.completion_lengths.sum())
        t = time.perf_counter()
        metrics: dict[str, float] = dict(self.score(rollout))
        metrics.update(rollout.metrics())
        times[1] += time.perf_counter() - t
        drawn.append(rollout)
        return rollout, metrics

    def collect(self, round_index: int, version: int) -> Round:
        """Round ``round_index``: its prompt batch(es) sampled and scored by the engine as it is, and
        the frozen reference's log-probs of the kept rollout (in the producer thread when there is
        one, so that they cost the update nothing)."""
        times = [0.0, 0.0, 0.0]  # rollout seconds, reward seconds, generated tokens
        drawn: list[TextRollout] = []
        rollout, metrics = self._draw(0, times, round_index, drawn)
        if self.dynamic_sampling:
            more = (self.prompts_per_step, self.max_sampling_draws, self.pad_token_id)
            draw_more = lambda i: self._draw(i, times, round_index, drawn)[0]  # noqa: E731
            rollout, stats = fill_informative(rollout, draw_more, *more)
            metrics.update(stats)
        if self.reference is not None:  # frozen: the same numbers here or in the update
            t = time.perf_counter()
            self._fill_logps(self._reference_forward, rollout, "ref_logprobs")
            metrics["reference_time"] = time.perf_counter() - t
        return Round(
            round_index, version, rollout, metrics, *times, drawn=drawn,
            loader=self.loader.state_dict(), reward_errors=dict(self.reward.errors),
        )  # fmt: skip

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        rnd, waits = self._next_round()
        self._last_round = rnd
        for drawn in rnd.drawn:
            self.bus.emit(Event.ROLLOUT_END, self, self.step + 1, rollout=drawn)
        rollout, metrics = rnd.rollout, dict(rnd.metrics)
        metrics.update(waits)
        rollout_time, reward_time, generated = rnd.rollout_time, rnd.reward_time, rnd.generated

        t = time.perf_counter()
        if not self.model.training:  # a no-op walk over every module otherwise
            self.model.train()
        updates_per_epoch = math.ceil(len(rollout) / self.minibatch_size)
        need_old = self.ppo_epochs * updates_per_epoch > 1
        if need_old:
            self._fill_logps(self._policy_forward, rollout, "old_logprobs")
        if self.reference is not None and rollout.ref_logprobs is None:  # a round queued before
            self._fill_logps(self._reference_forward, rollout, "ref_logprobs")  # collect computed them
        generator = torch.Generator().manual_seed(self.context.seed * 7919 + self.step)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        grad_norms, losses, sync_time, lr = [], [], 0.0, 0.0
        is_stats: dict[str, list[float]] = defaultdict(list)
        with_entropy = True  # the entropy metric (with grad only when the objective uses it)
        needs_entropy = self.objective.needs_entropy
        for _ in range(self.ppo_epochs):
            for mb in rollout.minibatches(self.minibatch_size, generator if updates_per_epoch > 1 else None):
                total_count = 0
                outs = []
                for s in range(0, len(mb), self.micro_batch_size):
                    micro = mb.select(range(s, min(s + self.micro_batch_size, len(mb))))
                    with self.precision.autocast():
                        logps, entropy = self._logps(self._policy_forward, micro, with_entropy)
                        weights = self._is_weights(micro, logps, is_stats) if self.is_correction else None
                        out = self.objective(
                            PolicyBatch(
                                logprobs=logps,
                                completion_mask=micro.completion_mask,
                                advantages=micro.advantages,
                                old_logprobs=micro.old_logprobs,
                                ref_logprobs=micro.ref_logprobs,
                                entropy=entropy if needs_entropy or entropy is None else entropy.detach(),
                                max_completion_length=self.max_completion_length,
                                is_weights=weights,
                            )
                        )
                    outs.append(out)
                    total_count += out.num_items
                # divide by the minibatch's total count so micro-batching equals one forward
                total = None
                for out in outs:
                    total = out.loss_sum if total is None else total + out.loss_sum
                loss = total / max(total_count, 1)
                self.backward(loss)
                step = self.optimizer_step(float(loss.detach()), 1)  # already a mean over the minibatch
                grad_norms.append(step["grad_norm"])
                losses.append(step["loss"])
                lr = step["lr"]
                for out in outs:
                    for k, v in out.metrics.items():
                        if isinstance(v, float) and not math.isnan(v):
                            sums[k] += v
                            counts[k] += 1
                ts = time.perf_counter()
                if self.producer is None or self.shared_engine:  # else: one snapshot per round
                    self.sync_weights()
                sync_time += time.perf_counter() - ts
        if self.producer is not None and self.max_staleness:  # the weights of round step + 1 + k
            ts = time.perf_counter()
            self._publish(self.step + 1)
            metrics["async/snapshot_s"] = time.perf_counter() - ts
        update_time = time.perf_counter() - t
        metrics.update({k: sums[k] / counts[k] for k in sums})
        if is_stats:
            metrics.update(
                {
                    "is/ratio_mean": sum(is_stats["is/ratio_mean"]) / len(is_stats["is/ratio_mean"]),
                    "is/ratio_min": min(is_stats["is/ratio_min"]),
                    "is/ratio_max": max(is_stats["is/ratio_max"]),
                    "is/clip_fraction": sum(is_stats["is/clip_fraction"]) / len(is_stats["is/clip_fraction"]),
                }
            )
        tokens = int(rollout.completion_lengths.sum())
        step_time = time.perf_counter() - start
        metrics.update(
            {
                "loss": sum(losses) / len(losses),
                "grad_norm": sum(grad_norms) / len(grad_norms),
                "lr": lr,
                "optimizer_steps": float(len(losses)),
                "num_tokens": float(tokens),
                "epoch": float(self.loader.epoch),
                "rollout_time": rollout_time,
                "reward_time": reward_time,
                "update_time": update_time,
                "sync_time": sync_time,
                "rollout_tokens_per_s": generated / max(rollout_time, 1e-9),
                "step_time": step_time,
            }
        )
        return metrics

    def sync_weights(self) -> None:
        """Make the engine generate with the current policy (a no-op for an engine sharing it)."""
        if self.shared_engine:
            self.engine.weights_updated()  # a fused optimizer step bumps no version counter
            return
        if is_adapted(self.policy):  # the engine runs the merged model
            self.engine.update_weights(merged_state_dict(self.policy))
            return
        state = {n: p.detach() for n, p in self.policy.named_parameters()}
        self.engine.update_weights(state)

    # state ----------------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        state = {"loader": self.loader.state_dict(), "reward_errors": dict(self.reward.errors)}
        return state if self.producer is None else self.async_state(state)

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.reward.errors.update(state.get("reward_errors", {}))
        self.restore_rounds(state.get("async"))

    def setup(self) -> None:
        self.sync_weights()  # a resumed policy's weights into a separate engine
        if self.max_staleness is not None:
            self.start_producer()

    def teardown(self) -> None:
        self.stop_producer()
        if self.engine is not None:
            self.engine.shutdown()
