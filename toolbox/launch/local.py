"""The local launcher: run the experiment in this process."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from toolbox.core.errors import ConfigError
from toolbox.core.registries import LAUNCHERS


@LAUNCHERS.register("local")
class LocalLauncher:
    """Runs ``toolbox train`` in the current process (no extra processes, no scheduler)."""

    def launch(self, cfg: DictConfig) -> dict[str, float]:
        from toolbox.experiment import run_experiment

        check_one_process(cfg)
        return run_experiment(cfg, warn=False)  # the command's compose_run warned once


def check_one_process(cfg: DictConfig) -> None:
    """``strategy=ddp`` in one process (no torchrun around it) is single-process training with a
    process group's overhead: almost certainly a forgotten ``launcher=torchrun``."""
    strategy = cfg.get("strategy")
    if strategy is not None and strategy.get("name") == "ddp" and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        raise ConfigError(
            "strategy=ddp with launcher=local runs one process; add launcher=torchrun "
            "launcher.nproc=N to train on N processes, or drop strategy=ddp."
        )
