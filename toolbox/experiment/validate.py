"""Validate a composed config before anything is built: every key, every type, every required value."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError
from toolbox.experiment.relations import check_relations
from toolbox.experiment.schema import (
    COMPONENT_MAPS,
    COMPONENT_NODES,
    GROUP_KEYS,
    TOP_LEVEL,
    TRAINER_INJECTED,
    RunSettings,
    node_at,
    registry_of,
)


def validate_config(cfg: DictConfig, explicit: Collection[str] = (), warn: bool = True) -> None:
    """Check every key, type and range of a composed config, and the relations between nodes
    (``relations.py``; ``explicit``: the keys the command line set), before anything is built.
    ``warn=False``: the same checks without the relations' warnings, for a config that was
    validated (and warned about) once already."""
    from toolbox.core.registry import validate_kwargs, validate_schema

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
    data = node_at(cfg, "data")
    if data is not None:
        bad = set(data.keys()) - {"source", "dataset", "collator"}
        if bad:
            raise ConfigError(f"data.{sorted(bad)[0]}: unknown key. Valid keys: source, dataset, collator.")
    for key, attr, injected in COMPONENT_NODES:
        node = node_at(cfg, key)
        if node is not None:
            registry_of(attr).validate(node, key, injected)
    for key, attr in COMPONENT_MAPS:
        for label, spec in (node_at(cfg, key) or {}).items():
            if spec is not None:
                registry_of(attr).validate(spec, f"{key}.{label}", frozenset())
    trainer = node_at(cfg, "trainer")
    if trainer is None:
        raise ConfigError("trainer: no trainer selected; add trainer=supervised (see `toolbox catalog`).")
    name = trainer.get("name")
    settings = {k: v for k, v in OmegaConf.to_container(trainer, resolve=True).items() if k != "name"}
    schema = registry_of("TRAINERS").schema(name, settings, path="trainer.name")
    settings = validate_schema(schema, settings, "trainer", f"trainer '{name}'", TRAINER_INJECTED)
    defaults = {f.name: f.default for f in schema.fields if not f.required}
    check_relations(cfg, {**defaults, **settings}, explicit, warn)


def _check_required(cfg: DictConfig) -> None:
    """A value a config file leaves as ``???`` must be given: name it, with its field's doc."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if not missing:
        return
    key = missing[0]
    doc = ""
    nodes = [(k, attr) for k, attr, _ in COMPONENT_NODES] + [("trainer", "TRAINERS")]
    for node_key, attr in sorted(nodes, key=lambda n: -len(n[0])):
        node = node_at(cfg, node_key) if key.startswith(node_key + ".") else None
        if node is None or "name" not in node:
            continue
        leaf = key[len(node_key) + 1 :]
        try:
            docs = {f.name: f.doc for f in registry_of(attr).fields(node.name)}
        except ConfigError:
            break
        kind = registry_of(attr).kind
        doc = f" ({kind} '{node.name}', {leaf}: {docs[leaf].rstrip('.')})" if docs.get(leaf) else ""
        break
    others = f" (also unset: {', '.join(missing[1:])})" if len(missing) > 1 else ""
    raise ConfigError(
        f"{key} is required{doc}; set {key}=... on the command line or in the experiment{others}."
    )
