"""Build every component of a validated config through its registry, wire them, run the trainer.

::

    parts = ExperimentBuilder.from_config(cfg).build()
    parts.trainer.fit()

``run_experiment(cfg)`` does both lines. What the builder injects into each component is the one
list in ``schema.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError
from toolbox.core.output import check_output_dir
from toolbox.experiment.schema import DATA_FACTS, TRAINER_INJECTED
from toolbox.experiment.validate import validate_config

if TYPE_CHECKING:  # the types only: building imports each component's module on first use
    import torch
    from transformers import PreTrainedTokenizerBase

    from toolbox.core.context import RunContext
    from toolbox.data.base import DatasetFactory, Example, Record, Splits
    from toolbox.distributed.base import Strategy
    from toolbox.objectives.base import Objective
    from toolbox.rl.envs import GymEnv
    from toolbox.serving.engine import InferenceEngine
    from toolbox.trainer.base import BaseTrainer
    from toolbox.trainer.callbacks.base import Callback
    from toolbox.trainer.precision import Precision


@dataclass
class Components:
    """Everything a trainer needs, built and wired: each field's type is what its registry builds."""

    cfg: DictConfig
    context: RunContext
    strategy: Strategy
    tokenizer: PreTrainedTokenizerBase | None  # models of vectors and graphs have none
    splits: Splits | None  # the raw records (None: an environment run)
    train_data: list[Example] | None  # the dataset factory's examples of each split
    eval_data: list[Example] | None
    model: torch.nn.Module
    objective: Objective
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    collator: Callable[[list[Example]], Any] | None  # examples -> one batch
    precision: Precision
    callbacks: list[Callback] = field(default_factory=list)
    evaluators: list[Callable[[Components], dict[str, float]]] = field(default_factory=list)
    dataset: DatasetFactory | None = None  # the dataset factory (its settings: max_length, field names)
    reference_model: torch.nn.Module | None = None  # the frozen reference (trainer and objective use one)
    engine: InferenceEngine | None = None  # the inference engine, when the trainer generates (GRPO)
    trainer: BaseTrainer | None = None
    env: GymEnv | None = None  # when the config has an env: node

    def release_reference(self) -> None:
        """Drop the reference model (a trainer that precomputed all it needs from it frees its memory)."""
        self.reference_model = None

    @property
    def test_records(self) -> Sequence[Record]:
        return self.splits.test


class ExperimentBuilder:
    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: DictConfig, warn: bool = True) -> ExperimentBuilder:
        """Validate ``cfg`` (``warn=False``: a config ``compose_run`` validated and warned about
        already, as the launchers get it; its errors are checked again, its warnings not repeated)."""
        validate_config(cfg, warn=warn)
        return cls(cfg)

    def build_data(self) -> tuple[Any, Any]:
        """The raw splits and the tokenizer (trained on the training split when it needs to be)."""
        from toolbox.core.registries import SOURCES, TOKENIZERS

        if self.cfg.get("data") is None:  # an environment run (env:) learns from no data set
            return None, None
        splits = SOURCES.build(self.cfg.data.source, "data.source")
        tokenizer = None  # models of vectors (classifiers) have none
        if self.cfg.get("tokenizer") is not None:
            tokenizer = TOKENIZERS.build(self.cfg.tokenizer, "tokenizer", corpus=splits.texts())
        return splits, tokenizer

    def build(self, with_trainer: bool = True) -> Components:
        from toolbox.core.context import RunContext
        from toolbox.core.device import seed_everything, set_determinism
        from toolbox.core.registries import (
            CALLBACKS,
            COLLATORS,
            DATASETS,
            ENVS,
            EVALUATORS,
            MODELS,
            OBJECTIVES,
            OPTIMIZERS,
            PRECISIONS,
            SCHEDULERS,
            STRATEGIES,
        )

        cfg = self.cfg
        if with_trainer:  # a run that cannot write its outputs fails before any work
            check_output_dir(cfg.run_dir)
        ctx = RunContext.from_env(cfg.run_dir, seed=cfg.seed, device=cfg.device)
        set_determinism(cfg.deterministic)
        if cfg.get("num_threads"):
            import torch

            torch.set_num_threads(cfg.num_threads)
        seed_everything(cfg.seed)
        strategy = STRATEGIES.build(cfg.strategy, "strategy", context=ctx)
        strategy.setup()

        splits, tokenizer = self.build_data()
        train_data = eval_data = collator = factory = None
        if splits is not None:
            factory = DATASETS.build(cfg.data.dataset, "data.dataset", tokenizer=tokenizer)
            train_data, eval_data = factory(splits.train), factory(splits.test)
            collator = COLLATORS.build(cfg.data.collator, "data.collator", tokenizer=tokenizer)
        env = ENVS.build(cfg.env, "env") if cfg.get("env") is not None else None

        data_facts = {
            **(splits.facts if splits is not None else {}),
            **(env.facts if env is not None else {}),
        }
        facts = model_facts(tokenizer, data_facts)
        seed_everything(cfg.seed)  # the model's init does not depend on what data building drew
        model = MODELS.build(cfg.model, "model", **facts)
        if cfg.get("peft"):  # LoRA/DoRA through peft: only the adapter trains (toolbox/nn/adapters.py)
            from toolbox.core.registries import ADAPTERS

            model = ADAPTERS.build(cfg.peft, "peft").apply(model)
        model = strategy.prepare_model(model)
        trainer_cls, settings = trainer_settings(cfg)
        optimizer = OPTIMIZERS.build(cfg.optimizer, "optimizer", model=model)
        scheduler = (
            SCHEDULERS.build(
                cfg.scheduler,
                "scheduler",
                optimizer=optimizer,
                total_steps=int(settings.get("max_steps", 1)),
            )
            if cfg.get("scheduler")
            else None
        )
        objective = OBJECTIVES.build(cfg.objective, "objective")
        parts = Components(
            cfg=cfg,
            context=ctx,
            strategy=strategy,
            tokenizer=tokenizer,
            splits=splits,
            train_data=train_data,
            eval_data=eval_data,
            model=model,
            objective=objective,
            optimizer=optimizer,
            scheduler=scheduler,
            collator=collator,
            precision=PRECISIONS.build(cfg.precision, "precision", device=ctx.device),
            callbacks=[
                CALLBACKS.build(s, f"callbacks.{k}") for k, s in (cfg.get("callbacks") or {}).items() if s
            ],
            evaluators=[EVALUATORS.build(s, f"eval.{k}") for k, s in (cfg.get("eval") or {}).items() if s],
            dataset=factory,
            env=env,
        )
        if with_trainer:
            if trainer_cls.uses_reference and objective.needs_reference:  # before any step or resume
                from toolbox.trainer.reference import frozen_reference

                parts.reference_model = frozen_reference(
                    strategy.unwrap(model), settings.get("reference_path"), strategy.device
                )
            if trainer_cls.uses_engine:
                parts.engine = self.build_engine(trainer_cls, settings, strategy.unwrap(model), tokenizer)
            parts.trainer = trainer_cls.from_builder(parts, **settings)
        return parts

    def build_engine(self, trainer_cls: Any, settings: dict[str, Any], policy: Any, tokenizer: Any) -> Any:
        """The run's ``engine`` node (or the trainer's default) on the policy model; an engine with
        a ``path`` loads its own copy of the weights (the trainer syncs them after each update)."""
        from toolbox.core.registries import ENGINES

        spec = self.cfg.get("engine")
        if spec is None:
            spec = trainer_cls.default_engine(settings)
        if spec.get("path"):
            return ENGINES.build(spec, "engine")
        from toolbox.nn.adapters import is_adapted, merged_copy

        if is_adapted(policy):  # engines run plain models: a merged copy, synced after each update
            policy = merged_copy(policy).eval()
        elif trainer_cls.engine_on_copy(settings):  # generates while the policy trains (async GRPO)
            import copy

            policy = copy.deepcopy(policy).eval().requires_grad_(False)
        return ENGINES.build(spec, "engine", model=policy, tokenizer=tokenizer)


def trainer_settings(cfg: DictConfig) -> tuple[Any, dict[str, Any]]:
    """The trainer class and its settings: the config's, over the signature's defaults."""
    from toolbox.core.registries import TRAINERS
    from toolbox.core.registry import component_fields

    node = cfg.trainer
    cls = TRAINERS.get(node.get("name"), path="trainer.name")
    given = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "name"}
    defaults = {f.name: f.default for f in component_fields(cls) if not f.required}
    return cls, {**{k: v for k, v in defaults.items() if k not in TRAINER_INJECTED}, **given}


def model_facts(tokenizer: Any, data_facts: dict[str, Any]) -> dict[str, Any]:
    """What the model may be given: the tokenizer's facts and the source's data facts (DATA_FACTS)."""
    undeclared = sorted(set(data_facts) - set(DATA_FACTS))
    if undeclared:
        raise ConfigError(
            f"data.source: the source reports the data fact(s) {', '.join(undeclared)}, which are not "
            "declared; add them to DATA_FACTS in toolbox/experiment/schema.py (one line each)."
        )
    return {**_tokenizer_facts(tokenizer), **data_facts}


def _tokenizer_facts(tokenizer: Any) -> dict[str, Any]:
    if tokenizer is None:
        return {}
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def run_experiment(cfg: DictConfig, warn: bool = True) -> dict[str, float]:
    """Build from config and fit; returns the final eval metrics (``warn``: as in
    :meth:`ExperimentBuilder.from_config`)."""
    parts = ExperimentBuilder.from_config(cfg, warn=warn).build()
    try:
        return parts.trainer.fit()
    finally:
        parts.strategy.teardown()
