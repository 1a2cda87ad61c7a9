"""``toolbox eval``: evaluate a trained run's exported model on its held-out split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import OmegaConf

from toolbox.core.errors import ConfigError


def evaluate_run(run_dir: Path, overrides: Sequence[str] = (), model_dir: Path | None = None) -> dict[str, float]:
    """Rebuild the run's data and evaluators from its config.yaml and score ``model_dir``."""
    from toolbox.experiment import ExperimentBuilder

    config = run_dir / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"--run: {config} does not exist; is {run_dir} a finished run (toolbox train --out ...)?")
    model_dir = Path(model_dir or run_dir / "model")
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"--model: {model_dir} holds no saved model (config.json); train the run first.")
    cfg = OmegaConf.merge(OmegaConf.load(config), OmegaConf.from_dotlist(list(overrides)))
    cfg.model = {"name": "pretrained", "path": str(model_dir)}
    cfg.tokenizer = {"name": "pretrained", "path": str(model_dir)}
    cfg.callbacks = {}
    cfg.resume_from = None
    parts = ExperimentBuilder.from_config(cfg).build(with_trainer=False)
    parts.model.eval()
    metrics: dict[str, float] = {}
    with torch.no_grad():
        for evaluator in parts.evaluators:
            metrics.update(evaluator(parts))
    return metrics
