"""A run folder belongs to one configuration.

``toolbox train`` into a folder that holds another configuration's run (its ``config.yaml`` differs and
it has checkpoints, a model or an eval.json) would mix the two: a new model beside the old run's
eval.json and checkpoints, and ``resume_from=auto`` continuing a training of other settings. So
:func:`claim_run_folder` refuses, naming the keys that differ, unless the user chose:

- ``--new-folder``: train into the next free ``<run_dir>-2``, ``-3``, ... (as Lightning's ``version_N``);
- ``--overwrite``: delete the old run's folder first.

A resume (``resume_from`` set) may change how the run is launched and how long it trains
(``trainer.max_steps``), nothing else. A folder whose old configuration left no checkpoint, model or
evaluation (an interrupted start, or the workflow's train stage after it dropped checkpoints of a
changed configuration) is simply reused.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError
from toolbox.core.output import check_output_dir
from toolbox.experiment.renamed_parts import renamed_container

IGNORED = ("resume_from", "run_dir", "launcher")  # where and how a run is started, not what it is
RESUMABLE = ("trainer.max_steps",)  # what a resume may change on top of IGNORED
ARTIFACTS = ("checkpoints", "model", "eval.json")
POLICIES = ("refuse", "new", "overwrite")


def claim_run_folder(cfg: DictConfig, policy: str = "refuse") -> DictConfig:
    """Check (and with ``new``/``overwrite`` prepare) ``cfg.run_dir`` for ``cfg``; returns ``cfg``
    (with ``run_dir`` moved for ``new``)."""
    if policy not in POLICIES:
        raise ConfigError(f"run folder policy {policy!r}: expected one of {', '.join(POLICIES)}.")
    run_dir = Path(str(cfg.run_dir))
    check_output_dir(run_dir)  # a folder this process can write into (core/output.py)
    differences = _differences(cfg, run_dir)
    if not differences:
        return cfg
    if policy == "new":
        cfg.run_dir = str(_next_free(run_dir))
        return cfg
    if policy == "overwrite":
        shutil.rmtree(run_dir)
        return cfg
    shown = "; ".join(differences[:5]) + (
        f"; and {len(differences) - 5} more" if len(differences) > 5 else ""
    )
    raise ConfigError(
        f"{run_dir} holds a run of another configuration ({shown}). Train into another folder with "
        f"--out DIR, start the next free one with --new-folder ({_next_free(run_dir)}), or replace "
        "the old run with --overwrite."
    )


def _differences(cfg: DictConfig, run_dir: Path) -> list[str]:
    """``key: old -> new`` for each setting that differs from the run already in ``run_dir`` (none
    when the folder holds no run, or an old configuration that left nothing behind)."""
    saved = run_dir / "config.yaml"
    if not saved.is_file() or not any((run_dir / name).exists() for name in ARTIFACTS):
        return []
    try:
        old = yaml.safe_load(saved.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(
            f"{saved} is not valid YAML ({e.problem}); move the folder away or use --out."
        ) from None
    old = renamed_container(old) if isinstance(old, dict) else old  # saved before a rename
    new = OmegaConf.to_container(cfg, resolve=True)
    ignored = IGNORED + (RESUMABLE if cfg.get("resume_from") else ())
    old_flat, new_flat = _flat(old), _flat(new)
    changed = [
        key
        for key in sorted(set(old_flat) | set(new_flat))
        if old_flat.get(key) != new_flat.get(key) and not _under(key, ignored)
    ]
    # another component (optimizer.name adamw -> sgd) is one difference, not one per field of it
    swapped = tuple(key.removesuffix(".name") for key in changed if key.endswith(".name"))
    return [
        f"{key.removesuffix('.name')}: {old_flat.get(key, '(unset)')} -> {new_flat.get(key, '(unset)')}"
        for key in changed
        if key.endswith(".name") or not _under(key, swapped)
    ]


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def _under(key: str, roots: tuple[str, ...]) -> bool:
    return any(key == root or key.startswith(root + ".") for root in roots)


def _next_free(run_dir: Path) -> Path:
    n = 2
    while (candidate := run_dir.with_name(f"{run_dir.name}-{n}")).exists():
        n += 1
    return candidate
