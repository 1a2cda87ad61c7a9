"""``toolbox eval``: evaluate a trained model on the held-out split its config describes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig, open_dict

from toolbox.core.errors import ConfigError


def evaluate_model(cfg: DictConfig, model_dir: Path, before: Path | None = None) -> dict[str, float]:
    """Rebuild the data and evaluators of ``cfg`` and score the model saved in ``model_dir``.

    With ``before`` (the model a run started from, e.g. the SFT model of a GRPO run), that model is
    scored too, by the same evaluators on the same split: ``before/<metric>`` and
    ``gain/<metric>`` (after - before) join the metrics.

    A preference run (``trainer=preference``: DPO and kin) is also scored as its trainer evaluates
    it: held-out ``eval/accuracy`` (chosen gets the higher implicit reward), ``eval/margin`` and the
    reward means, against the reference it trained with (``trainer.reference_path``, else the model
    it started from, ``model.path``). Its ``before`` model is that reference, so ``before/eval/accuracy``
    is 0 by construction.
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
    reference = _reference_path(cfg)
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
        cfg.tokenizer = None if untokenized else {"name": "hf_tokenizer", "path": str(model_dir)}
    cfg.callbacks = {}
    cfg.resume_from = None
    if reference is not None:
        with open_dict(cfg):
            cfg.trainer.reference_path = reference
    parts = ExperimentBuilder.from_config(cfg).build(with_trainer=reference is not None)
    if reference is not None:  # the preference trainer's own held-out metrics, then the evaluators
        return parts.trainer.evaluate()
    parts.model.eval()
    metrics: dict[str, float] = {}
    with torch.no_grad():
        for evaluator in parts.evaluators:
            metrics.update(evaluator(parts))
    return metrics


def _reference_path(cfg: DictConfig) -> str | None:
    """The reference model a preference run trained against (None for other runs)."""
    trainer = cfg.get("trainer") or {}
    if trainer.get("name") != "preference":
        return None
    path = trainer.get("reference_path") or (cfg.get("model") or {}).get("path")
    if not path or not (Path(path) / "config.json").is_file():
        warnings.warn(
            f"toolbox eval: this preference run's reference ({path or 'model.path unset'}) is no saved "
            "model, so its preference accuracy is not computed (the evaluators still run); set "
            "trainer.reference_path=DIR to the model it trained against.",
            stacklevel=3,
        )
        return None
    return str(path)
