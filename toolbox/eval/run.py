"""``toolbox eval``: evaluate a trained model on the held-out split its config describes."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig

from toolbox.core.errors import ConfigError


def evaluate_model(cfg: DictConfig, model_dir: Path) -> dict[str, float]:
    """Rebuild the data and evaluators of ``cfg`` and score the model saved in ``model_dir``."""
    from toolbox.experiment import ExperimentBuilder

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"--model: {model_dir} holds no saved model (config.json); train the run first.")
    cfg = cfg.copy()
    saved = json.loads((model_dir / "config.json").read_text())
    if saved.get("model_type") == "actor_critic":  # a policy of an environment run (ppo_env)
        cfg.model = {"name": "actor_critic", "path": str(model_dir)}
        cfg.tokenizer = None
    else:
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
    return dict(sorted(metrics.items()))
