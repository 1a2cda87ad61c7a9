"""The local launcher: run the experiment in this process."""

from __future__ import annotations

from omegaconf import DictConfig

from toolbox.core.registries import LAUNCHERS


@LAUNCHERS.register("local")
class LocalLauncher:
    """Runs ``toolbox train`` in the current process (no extra processes, no scheduler)."""

    def launch(self, cfg: DictConfig) -> dict[str, float]:
        from toolbox.experiment import run_experiment

        return run_experiment(cfg)
