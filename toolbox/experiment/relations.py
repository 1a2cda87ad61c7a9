"""Checks between values of different config nodes, after each node's own signature check.

A component's signature checks its own values (types and ranges, ``toolbox.core.bounds``); what
relates two nodes is checked here, before anything is built or written. One function per
relation, each raising ``ConfigError`` that names both keys and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.errors import ConfigError

log = logging.getLogger(__name__)


def check_relations(
    cfg: DictConfig, trainer_settings: dict[str, Any], explicit: Collection[str] = (), warn: bool = True
) -> None:
    """Every cross-node rule; ``trainer_settings`` are the trainer's values over its defaults and
    ``explicit`` the keys the command line set (``key=value`` overrides). ``warn=False`` checks
    again without repeating the warnings (a launcher re-checking a config its command composed)."""
    warmup_within_training(cfg, trainer_settings, explicit, warn)


def warmup_within_training(
    cfg: DictConfig, trainer_settings: dict[str, Any], explicit: Collection[str] = (), warn: bool = True
) -> None:
    """``scheduler.warmup_steps <= trainer.max_steps``: otherwise the learning rate never reaches
    its peak and the decay never starts. An error when the command line sets the warmup; a
    warning when an experiment's warmup outlasts a run shortened with ``trainer.max_steps=N`` (a
    smoke run of a recipe keeps the recipe's schedule)."""
    warmup = OmegaConf.select(cfg, "scheduler.warmup_steps", default=None)
    max_steps = trainer_settings.get("max_steps")
    if not (isinstance(warmup, int) and isinstance(max_steps, int) and warmup > max_steps):
        return
    message = (
        f"scheduler.warmup_steps={warmup} is more than trainer.max_steps={max_steps}: the "
        "learning rate would never reach its peak; set scheduler.warmup_steps to at most "
        f"{max_steps} (or raise trainer.max_steps)."
    )
    if "scheduler.warmup_steps" in explicit:
        raise ConfigError(message)
    if warn:
        log.warning(message)
