"""``toolbox eval``: evaluate a trained model on the held-out split its config describes."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig

from toolbox.core.errors import ConfigError


def evaluate_model(cfg: DictConfig, model_dir: Path, before: Path | None = None) -> dict[str, float]:
    """Rebuild the data and evaluators of ``cfg`` and score the model saved in ``model_dir``.

    With ``before`` (the model a run started from, e.g. the SFT model of a GRPO run), that model is
    scored too, by the same evaluators on the same split: ``before/<metric>`` and
    ``gain/<metric>`` (after - before) join the metrics.
    """
    metrics = _score(cfg, Path(model_dir))
    if before is not None:
        start = _score(cfg, Path(before))
        metrics.update({f"before/{k}": v for k, v in start.items()})
        metrics.update({f"gain/{k}": metrics[k] - v for k, v in start.items() if k in metrics})
    return dict(sorted(metrics.items()))


def _score(cfg: DictConfig, model_dir: Path) -> dict[str, float]:
    from toolbox.experiment import ExperimentBuilder

    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"--model: {model_dir} holds no saved model (config.json); train the run first.")
    cfg = cfg.copy()
    saved = json.loads((model_dir / "config.json").read_text())
    if saved.get("model_type") == "actor_critic":  # a policy of an environment run (ppo_env)
        cfg.model = {"name": "actor_critic", "path": str(model_dir)}
        cfg.tokenizer = None
    else:
        cfg.model = {"name": "pretrained", "path": str(model_dir)}
        # the trained model's tokenizer, saved beside it; models of vectors and graphs have none (the
        # workflow's eval slice carries the default tokenizer, which such a model never used)
        from toolbox.nn.models.saved import saved_model_spec

        untokenized = (
            saved_model_spec(model_dir) is not None and not (model_dir / "tokenizer_config.json").is_file()
        )
        cfg.tokenizer = None if untokenized else {"name": "pretrained", "path": str(model_dir)}
    cfg.callbacks = {}
    cfg.resume_from = None
    parts = ExperimentBuilder.from_config(cfg).build(with_trainer=False)
    parts.model.eval()
    metrics: dict[str, float] = {}
    with torch.no_grad():
        for evaluator in parts.evaluators:
            metrics.update(evaluator(parts))
    return metrics
