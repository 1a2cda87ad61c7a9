"""The agent GRPO trainer: GRPO over multi-turn, tool-using episodes of a text environment.

It is the GRPO trainer (``toolbox.trainer.grpo``) with another rollout: each round's
``prompts_per_step`` training records are tasks, and each task gets ``num_generations`` episodes of
the environment ``env`` (a TEXT_ENVS spec) rolled out through the same engine
(``toolbox.rl.episodes.EpisodeRunner``: batched across episodes, tools run between turns). An
episode becomes one rollout row: its opening prompt, then everything after it, with the loss mask
on the model's own tokens only (``TextRollout.from_episodes``); the environment's reward is the
row's reward, and the advantages are group-relative over the task's G episodes. Everything after
the rollout (advantages, old and reference log-probs, every loss type, minibatches, weight sync,
checkpoints) is GRPO's own code, unchanged: a one-turn environment gives GRPO's loss bit for bit.

``max_completion_length`` is the environment's token budget (``env.max_tokens``: dr_grpo's L);
``max_reply_tokens`` limits one reply. With ``traces`` (default ``traces.sqlite`` in the run
folder) every episode is recorded by the Tracer (``toolbox.rl.episode_trace``): ``toolbox traces
show`` and ``toolbox traces to-dataset`` read it.

One step's files, in order: ``data/loader.py`` (the round's tasks) · ``trainer/agent_grpo.py``
(``rollout``) → ``rl/episodes.py`` (``EpisodeRunner``: turns through ``serving/engine.py``, tool
calls parsed by ``data/hermes/calls.py`` and run by ``rl/tool_env.py``; the environment from
``rl/text_envs/``) → ``rl/rollouts.py`` (``TextRollout.from_episodes``) · ``rl/episode_trace.py``
(traces) · ``trainer/agent_grpo.py`` (``score``: ``rl/advantages.py``) → then GRPO's update, as in
``trainer/grpo.py``: ``objectives/logprobs.py`` → ``objectives/policy.py`` → ``trainer/base.py``
(``optimizer_step``) · ``trainer/callbacks/``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.rl.episodes import Episode, EpisodeRunner
from toolbox.rl.rollouts import TextRollout
from toolbox.serving.engine import SamplingParams
from toolbox.trainer.grpo import GRPOTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@TRAINERS.register("agent_grpo")
class AgentGRPOTrainer(GRPOTrainer):
    """GRPO over the episodes of a text environment (see the module docstring).

    Args:
        env: the TEXT_ENVS spec of the environment (``{name: calculator}``; its ``max_turns`` and
            ``max_tokens`` are the episode's limits).
        max_reply_tokens: the most tokens of one reply.
        schedule: ``waves`` (every pending reply in before the next are asked: reproducible) or
            ``async`` (an episode asks again as soon as its reply is in).
        traces: the trace store in the run folder every episode is recorded into (null: none).
        grpo: every setting of the ``grpo`` trainer (max_steps, prompts_per_step,
            num_generations, temperature, advantage, ...), except ``rewards`` and
            ``max_completion_length``: the environment gives the reward and the token budget.
    """

    config_from_base = True  # the grpo trainer's settings are this trainer's too (toolbox.core.registry)
    config_excludes = ("rewards", "max_completion_length")

    def __init__(
        self,
        parts: Components,
        env: dict[str, Any] | None = None,
        max_reply_tokens: int = 32,
        schedule: Literal["waves", "async"] = "waves",
        traces: str | None = "traces.sqlite",
        **grpo: Any,
    ) -> None:
        from toolbox.core.registries import TEXT_ENVS
        from toolbox.core.registry import validate_kwargs

        env = dict(env or {"name": "calculator"})
        budget = TEXT_ENVS.build(env, "trainer.env").max_tokens
        for key in self.config_excludes:
            if key in grpo:
                raise ConfigError(
                    f"trainer.{key}: set by the environment (its reward; its token budget, "
                    "trainer.env.max_tokens); remove it (trainer.max_reply_tokens limits one reply)."
                )
        validate_kwargs(GRPOTrainer, grpo, "trainer", "trainer 'agent_grpo'", frozenset({"parts"}))
        super().__init__(parts, **{**grpo, "max_completion_length": budget})
        self.runner = EpisodeRunner(self.engine, self.tokenizer, env, max_reply_tokens, schedule)
        self.env_name = env["name"]
        self.traces = traces
        self.tracer: Any = None
        self.last_episodes: list[Episode] = []

    @classmethod
    def default_engine(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The torch engine on the policy, one slot per episode of a round."""
        rows = settings.get("prompts_per_step", 8) * settings.get("num_generations", 4)
        return {"name": "torch", "max_batch_size": rows}

    @torch.no_grad()
    def rollout(
        self, examples: list[dict[str, Any]], draw: int = 0, round_index: int | None = None
    ) -> TextRollout:
        """``num_generations`` episodes per task; the rollout holds their rewards already."""
        params = SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        round_index = self.step if round_index is None else round_index
        round_seed = self.round_seed(round_index, draw)
        with self.generation_mode():
            episodes = self.runner.run(
                examples, self.num_generations, replace(params), round_seed if self.seed_sampling else None
            )
        keys = [k for k in examples[0] if k != "prompt_ids"]
        rollout = TextRollout.from_episodes(
            episodes,
            self.num_generations,
            {k: [ex.get(k) for ex in examples] for k in keys},
            pad_token_id=self.pad_token_id,
            mask_truncated=self.mask_truncated,
            device=self.strategy.device,
        )
        rollout.rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
        self.last_episodes = episodes
        self._trace(episodes, round_index)
        return rollout

    def score(self, rollout: TextRollout) -> dict[str, float]:
        """The environment's rewards (set by ``rollout``) into group-relative advantages."""
        device = rollout.completion_ids.device
        rollout.rewards = rollout.rewards.to(device)
        rollout.advantages = self.advantage(rollout.rewards.cpu(), rollout.num_generations).to(device)
        episodes = self.last_episodes
        turns = [len(e.turns) for e in episodes]
        metrics = {
            "episodes/turns_mean": sum(turns) / len(turns),
            "episodes/limit_ratio": sum(e.finish_reason == "length" for e in episodes) / len(episodes),
            "episodes/tool_calls_mean": sum(
                len(t.step.tool_runs) for e in episodes for t in e.turns if t.step is not None
            )
            / len(episodes),
        }
        names = sorted(
            {k for e in episodes for k, v in e.scores.items() if isinstance(v, bool | int | float)}
        )
        for name in names:
            values = [float(e.scores[name]) for e in episodes if name in e.scores]
            metrics[f"episodes/{name}"] = sum(values) / len(values)
        return metrics

    def _trace(self, episodes: list[Episode], round_index: int) -> None:
        if self.traces is None or not self.context.is_main:
            return
        from toolbox.rl.episode_trace import trace_episodes
        from toolbox.tracing.tracer import Tracer

        if self.tracer is None:
            from toolbox.rl.episode_trace import forget_rounds_after

            path = Path(self.context.run_dir) / self.traces
            path.parent.mkdir(parents=True, exist_ok=True)
            self.tracer = Tracer(path, flush_every=1 << 20)
            # a run resumed from a checkpoint (after a kill) generates again the rounds from its
            # first new one on: the ones its killed process recorded go, so each is recorded once
            forget_rounds_after(self.tracer, round_index)
        trace_episodes(self.tracer, episodes, round_index + 1, model="policy")

    def teardown(self) -> None:
        self.stop_producer()  # it may be tracing a round
        if self.tracer is not None:
            self.tracer.close()
            self.tracer = None
        super().teardown()
