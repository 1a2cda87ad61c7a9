"""A stored config made before a component was renamed reads as the new name.

The registries' ``renamed`` tables (``toolbox.core.registries``) refuse an old name in a config the
user writes, with a one-line error naming the new one. A composed config already on disk (a run
folder's ``config.yaml``, ``--config FILE``) records what was run: its old names are read as the new
ones, each with one line on stderr, so that ``toolbox eval --run``, ``--config`` and the run-folder
check of a run trained before the rename keep working::

    work/grpo/config.yaml: objective.name 'grpo' is read as 'clipped_policy' (renamed)
"""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.experiment.schema import component_paths, node_at, registry_of


def _rename(cfg: DictConfig) -> list[tuple[str, str, str]]:
    """Rename, in place, every component node whose name its registry has renamed: (path, old, new)."""
    changed = []
    for path, attr, _ in component_paths(cfg):
        node = node_at(cfg, path)
        if not isinstance(node, DictConfig) or not isinstance(node.get("name"), str):
            continue
        new = registry_of(attr).renamed.get(node.name)
        if new is not None:
            changed.append((path, node.name, new))
            node.name = new
    return changed


def read_renamed(cfg: DictConfig, source: str) -> None:
    """Read ``cfg``'s renamed component names as the new ones (in place), one line each on stderr
    (``source``: which file)."""
    for path, old, new in _rename(cfg):
        print(f"{source}: {path}.name {old!r} is read as {new!r} (renamed)", file=sys.stderr)


def renamed_container(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a stored config as plain data) with its renamed component names read as the new
    ones, silently: for comparing it with a config composed now."""
    cfg = OmegaConf.create(saved)
    _rename(cfg)
    return OmegaConf.to_container(cfg)
