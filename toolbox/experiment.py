"""Compose a config, validate it, build every component through its registry, run the trainer.

::

    cfg = load_config(["experiment=sft_arith", "trainer.max_steps=50"])
    parts = ExperimentBuilder.from_config(cfg).build()
    parts.trainer.fit()

``run_experiment(cfg)`` does the last two lines; ``compose_run`` is what the commands call (a
``--config`` file or a fresh composition, overrides, ``--out``, ``--data``, validation).

What the builder injects is one list, ``INJECTED`` (from ``COMPONENT_NODES``, ``TOKENIZER_FACTS``
and ``DATA_FACTS``), read by the builder, ``validate_config`` and ``toolbox catalog``: a new data
fact (an environment's ``obs_dim``, a graph's ``in_dim``) is one line in ``DATA_FACTS``.
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

    def composed(overrides: list[str]) -> DictConfig:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
                return compose(config_name="config", overrides=overrides)
        finally:
            GlobalHydra.instance().clear()

    try:
        # a group file holds only what differs from its component's signature: an override of a
        # field the file leaves to the default adds it (++key=value), deleting a key a component
        # node lacks (~key) deletes nothing, and a misspelt key still fails
        settable = [o for o in overrides if _field_override(o)]
        deletions = [o for o in overrides if o.startswith("~") and "." in o]
        if settable or deletions:
            first = composed([o for o in overrides if o not in settable and o not in deletions])
            overrides = [
                f"++{o}" if o in settable and _default_only(first, o) else o
                for o in overrides
                if o not in deletions or not _absent_from_component(first, o[1:].split("=")[0])
            ]
        cfg = composed(overrides)
    except (HydraException, OmegaConfBaseException) as e:
        message = _hydra_message(e)
        bad = re.search(r"Could not override '([^']+)'", message)
        if bad:  # a misspelt key: name the valid keys at that level, as validate_config does
            message = _unknown_override(
                bad.group(1), [o for o in overrides if o.split("=", 1)[0] != bad.group(1)]
            )
        raise ConfigError(message) from None
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    return fill_defaults(cfg)


def _field_override(override: str) -> bool:
    """``a.b=v``: sets a field of a node (not a group choice, a name, an addition or a deletion)."""
    key, sep, _ = override.partition("=")
    return bool(sep) and "." in key and not key.startswith(("+", "~")) and not key.endswith(".name")


def _default_only(cfg: DictConfig, override: str) -> bool:
    """Whether the override's key is absent from ``cfg`` but a field of the component there."""
    key = override.split("=", 1)[0]
    parent_path, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path, default=None)
    if not isinstance(parent, DictConfig) or leaf in parent:
        return False
    return leaf in _fields_of(cfg, parent_path)


def _absent_from_component(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` is a field a component node of ``cfg`` does not hold."""
    parent_path, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path, default=None)
    is_component = any(path == parent_path for path, _, _ in _component_paths(cfg))
    return is_component and isinstance(parent, DictConfig) and leaf not in parent


def _component_paths(cfg: DictConfig) -> list[tuple[str, str, frozenset[str]]]:
    """(config path, registry attribute, injected names) of every component node of ``cfg``."""
    paths = [*COMPONENT_NODES, ("trainer", "TRAINERS", TRAINER_INJECTED)]
    for key, attr in COMPONENT_MAPS:
        node = _node(cfg, key)
        if isinstance(node, DictConfig):
            paths += [(f"{key}.{label}", attr, frozenset()) for label in node]
    return paths


def _fields_of(cfg: DictConfig, path: str) -> dict[str, Any]:
    """The config fields (name -> signature default, or MISSING when required) of the component at
    ``path``; empty when it is no component node or names no registered component."""
    from toolbox.core.registry import component_fields

    node = _node(cfg, path)
    for key, attr, injected in _component_paths(cfg):
        if key != path:
            continue
        if not isinstance(node, DictConfig) or not isinstance(node.get("name"), str):
            return {}
        try:
            obj = _registry(attr).get(node.name)
        except ConfigError:
            return {}  # validate_config names the unknown component
        return {
            f.name: "???" if f.required else f.default
            for f in component_fields(obj)
            if f.name not in injected
        }
    return {}


def fill_defaults(cfg: DictConfig) -> DictConfig:
    """Every component node holds all its config fields, in signature order: the group files hold
    only what differs from the defaults, and a composed config (config.yaml) shows every value."""
    for path, _, _ in _component_paths(cfg):
        fields = _fields_of(cfg, path)
        if not fields:
            continue
        node = OmegaConf.to_container(_node(cfg, path), resolve=False)
        filled = {"name": node.pop("name")}
        for name, default in fields.items():
            if name == "name":
                continue  # the key that selects the component (a parameter so named cannot be set)
            if name in node:
                filled[name] = node.pop(name)
            elif default != "???" and _representable(default):
                filled[name] = list(default) if isinstance(default, tuple) else default
        filled.update(node)  # unknown keys stay: validate_config names them
        OmegaConf.update(cfg, path, filled, merge=False)
    return cfg


def _representable(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_representable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _representable(v) for k, v in value.items())
    return False


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


# What the builder injects (never set in a config): the one list that the builder, the validator
# and the catalog read. A model gets the tokenizer's facts and the data facts its constructor
# accepts; a new data fact (an environment's obs_dim, a graph's in_dim) is one line in DATA_FACTS,
# and its source returns it in ``Splits.facts``.
TOKENIZER_FACTS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")
DATA_FACTS = (
    "in_dim",
    "num_classes",
    "obs_dim",
    "num_actions",
    "action_dim",
    "action_low",
    "action_high",
)
MODEL_FACTS = TOKENIZER_FACTS + DATA_FACTS
# (config key, registry attribute, injected names) of every single-component node
COMPONENT_NODES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("model", "MODELS", frozenset(MODEL_FACTS)),
    ("peft", "ADAPTERS", frozenset()),
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
TRAINER_INJECTED = frozenset({"parts"})
#: every injected name: the catalog shows these apart from a component's config fields
INJECTED: frozenset[str] = TRAINER_INJECTED.union(*(names for _, _, names in COMPONENT_NODES))
# config key -> registry of nodes that are a mapping of label -> component spec
COMPONENT_MAPS = (("callbacks", "CALLBACKS"), ("eval", "EVALUATORS"))
TOP_LEVEL = {f.name for f in fields(RunSettings)}
GROUP_KEYS = {
    "model",
    "peft",
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


def _registry(attr: str):
    from toolbox.core import registries

    return getattr(registries, attr)


def _node(cfg: DictConfig, dotted: str) -> Any:
    return OmegaConf.select(cfg, dotted, default=None)


def validate_config(cfg: DictConfig) -> None:
    """Check every key and type of a composed config before anything is built."""
    from toolbox.core.registry import validate_kwargs

    _check_required(cfg)
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
    validate_kwargs(cls, settings, "trainer", f"trainer '{trainer.name}'", TRAINER_INJECTED)


def _check_required(cfg: DictConfig) -> None:
    """A value a config file leaves as ``???`` must be given: name it, with its field's doc."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if not missing:
        return
    key = missing[0]
    doc = ""
    nodes = [(k, attr) for k, attr, _ in COMPONENT_NODES] + [("trainer", "TRAINERS")]
    for node_key, attr in sorted(nodes, key=lambda n: -len(n[0])):
        node = _node(cfg, node_key) if key.startswith(node_key + ".") else None
        if node is None or "name" not in node:
            continue
        leaf = key[len(node_key) + 1 :]
        try:
            docs = {f.name: f.doc for f in _registry(attr).fields(node.name)}
        except ConfigError:
            break
        kind = _registry(attr).kind
        doc = f" ({kind} '{node.name}', {leaf}: {docs[leaf].rstrip('.')})" if docs.get(leaf) else ""
        break
    others = f" (also unset: {', '.join(missing[1:])})" if len(missing) > 1 else ""
    raise ConfigError(
        f"{key} is required{doc}; set {key}=... on the command line or in the experiment{others}."
    )


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
    dataset: Any = None  # the dataset factory (its settings: max_length, field names)
    reference_model: Any = None  # the frozen reference, when the trainer and the objective use one
    engine: Any = None  # the inference engine, when the trainer generates (GRPO)
    trainer: Any = None
    env: Any = None  # a toolbox.rl.envs.GymEnv when the config has an env: node

    def release_reference(self) -> None:
        """Drop the reference model (a trainer that precomputed all it needs from it frees its memory)."""
        self.reference_model = None

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
            "declared; add them to DATA_FACTS in toolbox/experiment.py (one line each)."
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


def compose_run(
    overrides: Sequence[str] = (),
    config_file: str | Path | None = None,
    run_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    validate: bool = True,
) -> DictConfig:
    """The config a stage runs with; ``toolbox compose``, ``train``, ``launch``, ``data`` and ``eval``
    all come through here.

    ``config_file`` (``--config``: a composed config.yaml) with key=value ``overrides`` on top, or a
    config composed anew from the overrides; then ``run_dir`` (``--out``), ``data_dir`` (``--data``:
    the output of ``toolbox data``) and, unless ``validate=False``, :func:`validate_config`.
    """
    overrides = list(overrides)
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(
                f"--config: {path} does not exist; write one with `toolbox compose --out {path}`."
            )
        bad = [o for o in overrides if "=" not in o or o.split("=", 1)[0].startswith(("+", "~"))]
        if bad:
            raise ConfigError(f"with --config only key=value overrides apply; got {bad[0]!r}.")
        cfg = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides))
    else:
        cfg = load_config(overrides)
    if run_dir:
        cfg.run_dir = str(run_dir)
    if data_dir:
        use_prepared_data(cfg, data_dir)
    if validate:
        validate_config(cfg)
    return cfg


def use_prepared_data(cfg: DictConfig, data_dir: str | Path) -> DictConfig:
    """Point a config at the output of ``toolbox data`` (records + tokenizer) instead of building them.
    A run without data (``data: null``, an environment run) is left as it is."""
    if cfg.get("data") is None:
        return cfg
    cfg.data.source = {"name": "prepared", "path": str(data_dir)}
    if cfg.get("tokenizer") is not None:  # models of vectors and graphs have none
        cfg.tokenizer = {"name": "pretrained", "path": str(Path(data_dir) / "tokenizer")}
    return cfg


def run_experiment(cfg: DictConfig) -> dict[str, float]:
    """Build from config and fit; returns the final eval metrics."""
    parts = ExperimentBuilder.from_config(cfg).build()
    try:
        return parts.trainer.fit()
    finally:
        parts.strategy.teardown()
