"""A harness backend named in a run's overrides reaches the workflow's eval stage, not its training."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))
import slice_config  # noqa: E402

HARNESS = "+eval.harness={name: lm_eval, task: arithmetic, max_examples: 200}"


def test_eval_slice_carries_the_harness_evaluator(compose):
    from toolbox.core.registries import EVALUATORS
    from toolbox.experiment.compose import validate_config

    full = compose(["experiment=demo", HARNESS])
    validate_config(full)  # the evaluator and its fields are known to the registry
    spec = OmegaConf.to_container(full.eval.harness)
    assert type(EVALUATORS.build(spec)).__name__ == "LmEvalTask"
    full = OmegaConf.to_container(full, resolve=True)
    defaults = OmegaConf.to_container(compose([]), resolve=True)
    evaluation = slice_config.slice_config(full, defaults, "eval")
    train = slice_config.slice_config(full, defaults, "train")
    harness = evaluation["eval"]["harness"]
    assert {k: harness[k] for k in ("name", "task", "max_examples")} == {
        "name": "lm_eval",
        "task": "arithmetic",
        "max_examples": 200,
    }
    assert "harness" not in (train.get("eval") or {})  # training does not wait for it
