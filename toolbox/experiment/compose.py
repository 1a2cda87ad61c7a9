"""Compose a run's config: Hydra's compose API over ``toolbox/configs``, every default filled in.

``load_config(overrides)`` composes ``configs/config.yaml``, the selected groups, the
``experiment=`` file and the overrides; ``fill_defaults`` writes every component's signature
defaults into its node. ``compose_run`` is what the commands call: a ``--config`` file or a fresh
composition, the overrides, ``--out``, ``--data``, then ``validate_config`` (``validate.py``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError
from toolbox.experiment.renamed_parts import read_renamed
from toolbox.experiment.schema import component_paths, fields_of, node_at
from toolbox.experiment.validate import validate_config

CONFIG_DIR = Path(__file__).parent.parent / "configs"


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
    return leaf in fields_of(cfg, parent_path)


def _absent_from_component(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` is a field a component node of ``cfg`` does not hold."""
    parent_path, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path, default=None)
    is_component = any(path == parent_path for path, _, _ in component_paths(cfg))
    return is_component and isinstance(parent, DictConfig) and leaf not in parent


def fill_defaults(cfg: DictConfig) -> DictConfig:
    """Every component node holds all its config fields, in signature order: the group files hold
    only what differs from the defaults, and a composed config (config.yaml) shows every value."""
    for path, _, _ in component_paths(cfg):
        fields = fields_of(cfg, path)
        if not fields:
            continue
        node = OmegaConf.to_container(node_at(cfg, path), resolve=False)
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
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", msg)
    options = re.search(r"Available options in '[^']+':\s*((?:\n\t[^\n]+)+)", msg)
    if missing and options:  # a misspelt group option: the closest one and the list, no search path
        group, given = missing.groups()
        valid = options.group(1).split()
        close = difflib.get_close_matches(given, valid, n=1)
        hint = f" Did you mean {group}={close[0]}?" if close else ""
        return f"{group}={given}: no such option in group '{group}'.{hint} Options: {', '.join(valid)}."
    if "Could not find" in msg and "Available options" in msg:
        return msg.replace("\n\t", " ").replace("\n", " ")
    return msg


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
        stored = load_yaml_config(path)
        read_renamed(stored, str(path))  # a config composed before a component was renamed
        cfg = OmegaConf.merge(stored, OmegaConf.from_dotlist(overrides))
    else:
        cfg = load_config(overrides)
    if run_dir:
        cfg.run_dir = str(run_dir)
    if data_dir:
        use_prepared_data(cfg, data_dir)
    if validate:
        explicit = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
        validate_config(cfg, explicit)
    return cfg


def load_yaml_config(path: Path) -> DictConfig:
    """A ``--config`` file: YAML holding a mapping, else a ``ConfigError`` naming line and column."""
    import yaml

    try:
        cfg = OmegaConf.load(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(
            f"--config: {path} is not valid YAML ({problem}{where}); fix it, or write it again with "
            f"`toolbox compose --out {path}`."
        ) from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(
            f"--config: {path} holds a {type(cfg).__name__}, not a mapping of keys; write it with "
            f"`toolbox compose --out {path}`."
        )
    return cfg


def use_prepared_data(cfg: DictConfig, data_dir: str | Path) -> DictConfig:
    """Point a config at the output of ``toolbox data`` (records + tokenizer) instead of building them.
    A run without data (``data: null``, an environment run) is left as it is."""
    if cfg.get("data") is None:
        return cfg
    cfg.data.source = {"name": "prepared", "path": str(data_dir)}
    if cfg.get("tokenizer") is not None:  # models of vectors and graphs have none
        cfg.tokenizer = {"name": "hf_tokenizer", "path": str(Path(data_dir) / "tokenizer")}
    return cfg
