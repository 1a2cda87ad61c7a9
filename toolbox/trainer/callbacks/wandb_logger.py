"""Weights & Biases: the composed config, every step's and every evaluation's metrics."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from toolbox.core.errors import ConfigError
from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


def config_container(cfg: Any) -> dict[str, Any]:
    """The composed config as plain dicts and lists, resolved where it can be."""
    if cfg is None:
        return {}
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a hard dependency
        return dict(cfg)
    if isinstance(cfg, DictConfig | ListConfig):
        try:
            return OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # an interpolation that only resolves inside Hydra: keep it as text
            return OmegaConf.to_container(cfg, resolve=False)
    return dict(cfg)


def _number(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


@CALLBACKS.register("wandb")
class WandbCallback(Callback):
    """Log the run to Weights & Biases: the composed config, train and eval metrics.

    W&B's own environment variables are honoured, as in any W&B script: ``WANDB_MODE``,
    ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_NAME``, ``WANDB_DIR``, ``WANDB_TAGS``. A value set in
    the config wins over the variable. With nothing set the mode is offline: the run is written under
    ``run_dir/wandb/`` and never touches the network; upload it later with
    ``wandb sync run_dir/wandb/offline-run-*``. ``disabled`` starts no W&B run at all (no folder).
    The W&B run id is saved in checkpoints, so a resumed run continues the same W&B run.

    Args:
        project: the W&B project (default: ``WANDB_PROJECT``, else toolbox).
        mode: offline (local files only), online (needs network and a login) or disabled
            (default: ``WANDB_MODE``, else offline).
        name: the run's display name (default: ``WANDB_NAME``, else the run directory's name).
        tags: tags attached to the run (added to ``WANDB_TAGS``).
    """

    def __init__(
        self,
        project: str | None = None,
        mode: str | None = None,
        name: str | None = None,
        tags: list[str] = [],  # noqa: B006 - copied, never mutated; shown as [] in the catalog
    ) -> None:
        mode = mode or os.environ.get("WANDB_MODE") or "offline"
        if mode == "dryrun":  # W&B's old name for offline, still accepted in WANDB_MODE
            mode = "offline"
        if mode not in ("offline", "online", "disabled"):
            where = "callbacks.wandb.mode" if mode != os.environ.get("WANDB_MODE") else "WANDB_MODE"
            raise ConfigError(f"{where}: expected offline, online or disabled, got {mode!r}.")
        if importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                "callbacks.wandb needs the wandb package: pip install 'toolbox[wandb]' "
                "(or remove the wandb callback from the config)."
            )
        self.project = project or os.environ.get("WANDB_PROJECT") or "toolbox"
        self.mode = mode
        self.name = name or os.environ.get("WANDB_NAME")
        self.tags = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t] + list(tags)
        self.run = None
        self.run_id: str | None = None  # restored from a checkpoint to continue the same run

    def on_fit_start(self, data: EventData) -> None:
        if self.mode == "disabled":
            return  # no run, no folder: W&B's own disabled mode still writes one
        import wandb

        run_dir = Path(data.trainer.context.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {}
        if self.run_id is not None:
            kwargs.update(id=self.run_id, resume="allow")
        self.run = wandb.init(
            project=self.project,
            name=self.name or run_dir.name,
            mode=self.mode,
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
            config=config_container(getattr(data.trainer, "cfg", None)),
            tags=self.tags,
            **kwargs,
        )
        self.run_id = self.run.id

    def _log(self, data: EventData) -> None:
        if self.run is not None and data.metrics:
            self.run.log({k: _number(v) for k, v in data.metrics.items()}, step=data.step)

    def on_step_end(self, data: EventData) -> None:
        self._log(data)

    def on_eval_end(self, data: EventData) -> None:
        self._log(data)

    def on_fit_end(self, data: EventData) -> None:
        if self.run is not None:
            self.run.summary["stopped_early"] = bool(data.payload.get("stopped_early"))
            self.run.finish()
            self.run = None

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id")
