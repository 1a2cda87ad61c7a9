"""The child side of a rollout process (``trainer.producer=process``): the run's trainer, built
again from its config in the child, generating rounds exactly as a producer thread would.

:class:`toolbox.rl.producer_process.ProcessProducer` calls :func:`grpo_rollout_worker` once in the
child (a ``functools.partial`` the builder hands the trainer as ``Components.rollout_worker``). The
child's trainer has no producer of its own and an engine sharing its policy; it starts from the
parent's prompt loader position and reward error counts, and its policy gets the parent's weights
before its first round (``load_weights``), so that ``collect`` draws, samples, scores and computes
the reference's log-probs as the parent's thread would have.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf, open_dict


def registering_modules() -> list[str]:
    """The modules outside toolbox that registered a component (a user's reward module, a test):
    a spawned process imports them so that the config's names resolve there as here. A script run
    as ``__main__`` is run again by the spawn itself (its registrations then happen at import)."""
    from toolbox.core import registries
    from toolbox.core.registry import Registry

    found: set[str] = set()
    for value in vars(registries).values():
        if isinstance(value, Registry):
            found |= value.entry_modules()
    return sorted(m for m in found if m.split(".")[0] not in ("toolbox", "__main__", "__mp_main__"))


def grpo_rollout_worker(
    builder: type,
    config_yaml: str,
    modules: list[str],
    loader_state: dict[str, Any],
    reward_errors: dict[str, int],
) -> tuple[Callable[[int, int], Any], Callable[[Any], None]]:
    """``(collect, load_weights)`` of a GRPO trainer built by ``builder`` (the ExperimentBuilder
    class, which imports this module) from ``config_yaml`` (the run's resolved config) in this
    process after importing ``modules`` (:func:`registering_modules` of the parent), its loader
    and reward errors where the parent's stand."""
    for module in modules:
        importlib.import_module(module)
    cfg = OmegaConf.create(config_yaml)
    with open_dict(cfg):
        cfg.trainer.max_staleness = None  # no producer of its own: collect runs in this process
        cfg.trainer.producer = "thread"
        cfg.callbacks = None
    trainer = builder.from_config(cfg, warn=False).build().trainer
    trainer.loader.load_state_dict(loader_state)
    trainer.reward.errors.clear()
    trainer.reward.errors.update(reward_errors)
    return trainer.collect, trainer.engine.update_weights
