"""What a composed config holds, and what the builder injects into it: the one list.

``RunSettings`` are the top-level keys; ``COMPONENT_NODES`` (with ``COMPONENT_MAPS``) name every
node that selects a registered component and the arguments the builder injects into it
(``TOKENIZER_FACTS``, ``DATA_FACTS``, the model, the tokenizer, ...). Composing (``compose.py``),
validating (``validate.py``), building (``build.py``) and ``toolbox catalog`` all read these lists,
so a new data fact (an environment's ``obs_dim``, a graph's ``in_dim``) is one line in ``DATA_FACTS``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.bounds import AtLeastOne
from toolbox.core.errors import ConfigError


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
    num_threads: AtLeastOne | None = None


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


def registry_of(attr: str):
    """The registry named ``attr`` in ``toolbox.core.registries`` (imported on first use)."""
    from toolbox.core import registries

    return getattr(registries, attr)


def node_at(cfg: DictConfig, dotted: str) -> Any:
    """The node at the dotted path ``dotted`` of ``cfg``, or None."""
    return OmegaConf.select(cfg, dotted, default=None)


def component_paths(cfg: DictConfig) -> list[tuple[str, str, frozenset[str]]]:
    """(config path, registry attribute, injected names) of every component node of ``cfg``."""
    paths = [*COMPONENT_NODES, ("trainer", "TRAINERS", TRAINER_INJECTED)]
    for key, attr in COMPONENT_MAPS:
        node = node_at(cfg, key)
        if isinstance(node, DictConfig):
            paths += [(f"{key}.{label}", attr, frozenset()) for label in node]
    return paths


def fields_of(cfg: DictConfig, path: str) -> dict[str, Any]:
    """The config fields (name -> signature default, or MISSING when required) of the component at
    ``path``; empty when it is no component node or names no registered component."""
    node = node_at(cfg, path)
    for key, attr, injected in component_paths(cfg):
        if key != path:
            continue
        if not isinstance(node, DictConfig) or not isinstance(node.get("name"), str):
            return {}
        try:  # read from the component's source when it can be: composing imports no torch
            fields = registry_of(attr).schema(node.name).fields
        except ConfigError:
            return {}  # validate_config names the unknown component
        return {f.name: "???" if f.required else f.default for f in fields if f.name not in injected}
    return {}
