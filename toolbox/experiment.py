"""Compose a config, validate it, build every component through its registry, run the trainer.

::

    cfg = load_config(["experiment=sft_arith", "trainer.max_steps=50"])
    parts = ExperimentBuilder.from_config(cfg).build()
    parts.trainer.fit()

``run_experiment(cfg)`` does the last two lines.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError

CONFIG_DIR = Path(__file__).parent / "configs"


# composing ----------------------------------------------------------------------------------------
def load_config(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> DictConfig:
    """Compose ``configs/config.yaml`` + the selected groups + ``experiment=`` + overrides.

    Uses Hydra's compose API: no change of working directory and no timestamped output folders.
    ``config_dir`` (or ``TOOLBOX_CONFIG_DIR``) adds a folder of the same layout whose files take
    precedence, so a project can ship its own experiments.
    """
    import os

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    extra = config_dir or os.environ.get("TOOLBOX_CONFIG_DIR")
    overrides = list(overrides)
    if extra:
        overrides.append(f"hydra.searchpath=[file://{Path(extra).resolve()}]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        message = _hydra_message(e)
        bad = re.search(r"Could not override '([^']+)'", message)
        if bad:  # a misspelt key: name the valid keys at that level, as validate_config does
            message = _unknown_override(
                bad.group(1), [o for o in overrides if o.split("=", 1)[0] != bad.group(1)]
            )
        raise ConfigError(message) from None
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    return cfg


def _unknown_override(key: str, others: list[str]) -> str:
    """The message for an override of a key the config lacks: the valid keys and the closest one."""
    parent_path, _, name = key.rpartition(".")
    try:
        parent = OmegaConf.select(load_config(others), parent_path) if parent_path else load_config(others)
    except ConfigError:
        parent = None
    valid = sorted(str(k) for k in parent.keys()) if isinstance(parent, DictConfig) else []
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    listed = f" Valid keys: {', '.join(valid)}." if valid else ""
    return f"{key}: unknown key.{hint}{listed} To add a new key, write +{key}=..."


def _hydra_message(e: Exception) -> str:
    msg = str(e).strip()
    if "Could not find" in msg and "Available options" in msg:
        return msg.replace("\n\t", " ").replace("\n", " ")
    return msg


# validating ---------------------------------------------------------------------------------------
@dataclass
class RunSettings:
    """Top-level keys of the composed config.

    Args:
        run_name: the run's name (results/<run_name> by default).
        run_dir: where the run writes config.yaml, metrics, checkpoints and the model.
        seed: seeds Python, NumPy, torch, the data order and the model's initialisation.
        device: auto (cuda when visible, else cpu), cpu, cuda or cuda:N.
        deterministic: ask torch for deterministic kernels.
        resume_from: null (fresh run), auto (newest usable checkpoint of run_dir) or a checkpoint folder.
        num_threads: torch intra-op threads (null: torch's default, one per core).
    """

    run_name: str = "default"
    run_dir: str = "results/default"
    seed: int = 0
    device: str = "auto"
    deterministic: bool = True
    resume_from: str | None = None
    num_threads: int | None = None


# (config key, registry attribute, injected names) of every single-component node
COMPONENT_NODES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("model", "MODELS", frozenset()),
    ("tokenizer", "TOKENIZERS", frozenset({"corpus"})),
    ("data.source", "SOURCES", frozenset()),
    ("data.dataset", "DATASETS", frozenset({"tokenizer"})),
    ("data.collator", "COLLATORS", frozenset({"tokenizer"})),
    ("objective", "OBJECTIVES", frozenset()),
    ("optimizer", "OPTIMIZERS", frozenset({"model"})),
    ("scheduler", "SCHEDULERS", frozenset({"optimizer", "total_steps"})),
    ("precision", "PRECISIONS", frozenset({"device"})),
    ("strategy", "STRATEGIES", frozenset({"context"})),
    ("launcher", "LAUNCHERS", frozenset()),
    ("engine", "ENGINES", frozenset({"model", "tokenizer"})),
    ("env", "ENVS", frozenset()),
)
# config key -> registry of nodes that are a mapping of label -> component spec
COMPONENT_MAPS = (("callbacks", "CALLBACKS"), ("eval", "EVALUATORS"))
TOP_LEVEL = {f.name for f in fields(RunSettings)}
GROUP_KEYS = {
    "model",
    "tokenizer",
    "data",
    "objective",
    "trainer",
    "optimizer",
    "scheduler",
    "callbacks",
    "precision",
    "strategy",
    "launcher",
    "engine",
    "eval",
    "env",
}
MODEL_FACTS = (
    "vocab_size",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "in_dim",
    "num_classes",
    "obs_dim",
    "num_actions",
    "action_dim",
    "action_low",
    "action_high",
)


def _registry(attr: str):
    from toolbox.core import registries

    return getattr(registries, attr)


def _node(cfg: DictConfig, dotted: str) -> Any:
    return OmegaConf.select(cfg, dotted, default=None)


def validate_config(cfg: DictConfig) -> None:
    """Check every key and type of a composed config before anything is built."""
    from toolbox.core.registry import validate_kwargs

    unknown = set(cfg.keys()) - TOP_LEVEL - GROUP_KEYS
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, sorted(TOP_LEVEL | GROUP_KEYS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"{key}: unknown top-level key.{hint} Valid keys: {', '.join(sorted(TOP_LEVEL | GROUP_KEYS))}."
        )
    top = {k: OmegaConf.to_container(cfg, resolve=True)[k] for k in TOP_LEVEL if k in cfg}
    validate_kwargs(RunSettings, top, "config", "the run")
    data = _node(cfg, "data")
    if data is not None:
        bad = set(data.keys()) - {"source", "dataset", "collator"}
        if bad:
            raise ConfigError(f"data.{sorted(bad)[0]}: unknown key. Valid keys: source, dataset, collator.")
    for key, attr, injected in COMPONENT_NODES:
        node = _node(cfg, key)
        if node is not None:
            _registry(attr).validate(node, key, injected)
    for key, attr in COMPONENT_MAPS:
        for label, spec in (_node(cfg, key) or {}).items():
            if spec is not None:
                _registry(attr).validate(spec, f"{key}.{label}", frozenset())
    trainer = _node(cfg, "trainer")
    if trainer is None:
        raise ConfigError("trainer: no trainer selected; add trainer=supervised (see `toolbox catalog`).")
    cls = _registry("TRAINERS").get(trainer.get("name"), path="trainer.name")
    settings = {k: v for k, v in OmegaConf.to_container(trainer, resolve=True).items() if k != "name"}
    validate_kwargs(cls, settings, "trainer", f"trainer '{trainer.name}'", frozenset({"parts"}))


# building -----------------------------------------------------------------------------------------
@dataclass
class Components:
    """Everything a trainer needs, built and wired."""

    cfg: DictConfig
    context: Any
    strategy: Any
    tokenizer: Any
    splits: Any
    train_data: Any
    eval_data: Any
    model: Any
    objective: Any
    optimizer: Any
    scheduler: Any
    collator: Any
    precision: Any
    callbacks: list = field(default_factory=list)
    evaluators: list = field(default_factory=list)
    trainer: Any = None
    env: Any = None  # a toolbox.rl.envs.GymEnv when the config has an env: node

    @property
    def test_records(self) -> Any:
        return self.splits.test


class ExperimentBuilder:
    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: DictConfig) -> ExperimentBuilder:
        validate_config(cfg)
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
            TRAINERS,
        )

        cfg = self.cfg
        ctx = RunContext.from_env(cfg.run_dir, seed=cfg.seed, device=cfg.device)
        set_determinism(cfg.deterministic)
        if cfg.get("num_threads"):
            import torch

            torch.set_num_threads(cfg.num_threads)
        seed_everything(cfg.seed)
        strategy = STRATEGIES.build(cfg.strategy, "strategy", context=ctx)
        strategy.setup()

        splits, tokenizer = self.build_data()
        train_data = eval_data = collator = None
        if splits is not None:
            factory = DATASETS.build(cfg.data.dataset, "data.dataset", tokenizer=tokenizer)
            train_data, eval_data = factory(splits.train), factory(splits.test)
            collator = COLLATORS.build(cfg.data.collator, "data.collator", tokenizer=tokenizer)
        env = ENVS.build(cfg.env, "env") if cfg.get("env") is not None else None

        facts = {
            **_tokenizer_facts(tokenizer),
            **(splits.facts if splits is not None else {}),
            **(env.facts if env is not None else {}),
        }
        seed_everything(cfg.seed)  # the model's init does not depend on what data building drew
        model = strategy.prepare_model(MODELS.build(cfg.model, "model", **facts))
        trainer_cfg = cfg.trainer
        optimizer = OPTIMIZERS.build(cfg.optimizer, "optimizer", model=model)
        scheduler = (
            SCHEDULERS.build(
                cfg.scheduler,
                "scheduler",
                optimizer=optimizer,
                total_steps=int(trainer_cfg.get("max_steps", 1)),
            )
            if cfg.get("scheduler")
            else None
        )
        parts = Components(
            cfg=cfg,
            context=ctx,
            strategy=strategy,
            tokenizer=tokenizer,
            splits=splits,
            train_data=train_data,
            eval_data=eval_data,
            model=model,
            objective=OBJECTIVES.build(cfg.objective, "objective"),
            optimizer=optimizer,
            scheduler=scheduler,
            collator=collator,
            precision=PRECISIONS.build(cfg.precision, "precision", device=ctx.device),
            callbacks=[
                CALLBACKS.build(s, f"callbacks.{k}") for k, s in (cfg.get("callbacks") or {}).items() if s
            ],
            evaluators=[EVALUATORS.build(s, f"eval.{k}") for k, s in (cfg.get("eval") or {}).items() if s],
            env=env,
        )
        if with_trainer:
            settings = {
                k: v for k, v in OmegaConf.to_container(trainer_cfg, resolve=True).items() if k != "name"
            }
            parts.trainer = TRAINERS.get(trainer_cfg.name).from_builder(parts, **settings)
        return parts


def _tokenizer_facts(tokenizer: Any) -> dict[str, Any]:
    if tokenizer is None:
        return {}
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def use_prepared_data(cfg: DictConfig, data_dir: str | Path) -> DictConfig:
    """Point a config at the output of ``toolbox data`` (records + tokenizer) instead of building them.
    A run without data (``data: null``, an environment run) is left as it is."""
    if cfg.get("data") is None:
        return cfg
    cfg.data.source = {"name": "prepared", "path": str(data_dir)}
    cfg.tokenizer = {"name": "pretrained", "path": str(Path(data_dir) / "tokenizer")}
    return cfg


def run_experiment(cfg: DictConfig) -> dict[str, float]:
    """Build from config and fit; returns the final eval metrics."""
    parts = ExperimentBuilder.from_config(cfg).build()
    try:
        return parts.trainer.fit()
    finally:
        parts.strategy.teardown()
