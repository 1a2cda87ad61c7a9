"""``env_episodes``: greedy episodes of a text environment on the held-out records, scored by it.

Each held-out record (the first ``max_examples``) is a task of the environment ``env`` (a
TEXT_ENVS spec; null: the run's ``trainer.env``, as ``agent_grpo`` trains on). One episode per task
is rolled out exactly as the ``agent_grpo`` trainer rolls out its own (``toolbox.rl.episodes.
EpisodeRunner``: the opening rendered by the chat template, replies parsed as the server parses
them, tools run between turns, the environment's ``max_turns`` / ``max_tokens`` limits), but
greedy (temperature 0) through an inference engine on the model: the run's engine when it
generates with the model itself (``agent_grpo``), else a torch engine built for the call
(``batch_size`` episodes decoded together) and shut down after it.

Metrics: ``eval/reward`` (the mean reward; an episode ended by a limit counts the environment's
``limit_reward()``) and ``eval/<name>`` for each of the environment's ``score_names`` (the mean
of that score over the episodes; an episode that ended at a limit before the environment scored it
counts 0). On the ``calculator`` environment ``eval/correct`` is the ``tool_calls`` evaluator's
``eval/answer_accuracy`` for the same model and problems (both greedy, scored by the same final
answer rule), and ``eval/tool_call_ok`` its ``eval/tool_call_success`` (the first calculator call
was right).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@EVALUATORS.register("env_episodes")
class EnvEpisodes:
    """Greedy episodes of a text environment on the held-out records: ``eval/reward`` and
    ``eval/<score>`` for each of the environment's ``score_names`` (see the module docstring).

    Args:
        env: the TEXT_ENVS spec (``{name: lookup_calculator}``; its ``max_turns`` and
            ``max_tokens`` limit an episode); null: the run's ``trainer.env``.
        max_examples: run the first this many held-out records (null: all).
        max_reply_tokens: the most tokens of one reply (``agent_grpo``'s ``max_reply_tokens``).
        batch_size: episodes decoded together by an engine built for the call.
    """

    def __init__(
        self,
        env: dict[str, Any] | None = None,
        max_examples: int | None = 200,
        max_reply_tokens: int = 32,
        batch_size: int = 64,
    ) -> None:
        if max_reply_tokens < 1 or batch_size < 1 or (max_examples is not None and max_examples < 1):
            raise ConfigError(
                f"eval.env_episodes: max_reply_tokens={max_reply_tokens}, batch_size={batch_size}, "
                f"max_examples={max_examples}; each must be >= 1 (max_examples null: all)."
            )
        self.env = dict(env) if env is not None else None
        self.max_examples = max_examples
        self.max_reply_tokens = max_reply_tokens
        self.batch_size = batch_size
        self.last_episodes: list[Any] = []

    def env_spec(self, parts: Components) -> dict[str, Any]:
        """The environment's spec: ``env``, else the run's ``trainer.env``."""
        if self.env is not None:
            return self.env
        from omegaconf import OmegaConf

        cfg = getattr(parts, "cfg", None)
        trainer = cfg.get("trainer") if cfg is not None else None
        spec = trainer.get("env") if trainer is not None else None
        if spec is None:
            raise ConfigError(
                "eval.env_episodes: no environment to run; name one (eval.env_episodes.env={name: "
                "lookup_calculator}) or train with trainer=agent_grpo, whose trainer.env it runs."
            )
        return dict(OmegaConf.to_container(spec, resolve=True)) if OmegaConf.is_config(spec) else dict(spec)

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.core.registries import TEXT_ENVS
        from toolbox.rl.episodes import EpisodeRunner
        from toolbox.serving.engine import SamplingParams

        spec = self.env_spec(parts)
        names = tuple(TEXT_ENVS.build(spec, "eval.env_episodes.env").score_names)
        records = list(parts.test_records[: self.max_examples] if self.max_examples else parts.test_records)
        if not records:
            raise ConfigError(
                "eval.env_episodes: the run has no held-out records (the tasks of the episodes); give the "
                "source a test split (data.source.num_test) or remove the evaluator (eval.env_episodes=null)."
            )
        model = parts.strategy.unwrap(parts.model)
        engine = getattr(parts, "engine", None)
        own = engine is None or not engine.shares_model(model)
        if own:
            from toolbox.core.registries import ENGINES

            spec_engine = {"name": "torch", "max_batch_size": self.batch_size, "max_queue_size": len(records)}
            engine = ENGINES.build(spec_engine, "eval.env_episodes", model=model, tokenizer=parts.tokenizer)
        try:
            runner = EpisodeRunner(engine, parts.tokenizer, spec, self.max_reply_tokens, "waves")
            episodes = runner.run(records, 1, SamplingParams(temperature=0.0), seed=None)
        finally:
            if own:
                engine.shutdown()
        self.last_episodes = episodes
        n = len(episodes)
        metrics = {"eval/reward": sum(float(e.reward or 0.0) for e in episodes) / n}
        for name in names:
            metrics[f"eval/{name}"] = sum(float(e.scores.get(name, 0.0)) for e in episodes) / n
        return metrics
