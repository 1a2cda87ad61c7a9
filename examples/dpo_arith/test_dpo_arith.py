"""examples/dpo_arith: both stages run end to end on a tiny setting; the slow test reproduces the README."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _run_main():
    """examples/dpo_arith/run.py's main, loaded by path (examples/grpo_arith has a run.py too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dpo_arith_run", Path(__file__).parent / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


TINY_SFT = [
    "trainer.max_steps=20",
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "model.hidden_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=128",
    "data.source.num_train=256",
    "data.source.num_test=32",
    "eval=lm",
]
TINY_DPO = [
    "trainer.max_steps=4",
    "trainer.batch_size=8",
    "trainer.eval_every=2",
    "trainer.save_every=0",
    "data.source.num_train=256",
    "data.source.num_test=32",
    "eval.exact_match.max_examples=8",
]


def test_sft_then_dpo_runs_and_reports(tmp_path):
    main = _run_main()

    args = ["--out", str(tmp_path), "--seed", "3"]
    args += [a for o in TINY_SFT for a in ("--sft-override", o)]
    args += [a for o in TINY_DPO for a in ("--dpo-override", o)]
    result = main(args)
    assert result == json.loads((tmp_path / "results.json").read_text())
    assert result["seed"] == 3 and result["sft_model"] == str(tmp_path / "sft" / "model")
    assert result["dpo"]["before"]["eval/accuracy"] == 0.0  # the policy starts as its own reference
    after = result["dpo"]["after"]
    assert set(after) == {"eval/accuracy", "eval/margin", "eval/exact_match", "eval/loss"}
    assert 0.0 <= after["eval/accuracy"] <= 1.0
    assert (tmp_path / "dpo" / "model" / "config.json").is_file()


def test_experiment_composes_with_the_sft_split():
    from toolbox.experiment import load_config

    dpo = load_config(["experiment=dpo_arith"])
    sft = load_config(["experiment=sft_arith"])
    for key in ("digits", "operators", "num_train", "num_test", "seed"):
        assert dpo.data.source[key] == sft.data.source[key], key  # same problems, same held-out prompts
    assert dpo.trainer.name == "preference" and dpo.objective.name == "dpo_mix"
    assert list(dpo.objective.loss_type) == ["sigmoid", "sft"]  # DPO + the chosen answers' NLL (RPO)


@pytest.mark.slow
def test_the_recipe_meets_its_matrix_expectation(tmp_path):
    """The README's claim for seed 0 (the matrix's expectation): SFT to the end, then DPO + NLL:
    >= 0.85 preference accuracy on 200 held-out pairs, and greedy exact match >= 0.95 and no more
    than 0.05 below the SFT model's (about 3 CPU-minutes)."""
    main = _run_main()

    result = main(["--out", str(tmp_path)])
    before, after = result["dpo"]["before"], result["dpo"]["after"]
    assert after["eval/accuracy"] >= 0.85
    assert (
        after["eval/exact_match"] >= 0.95 and after["eval/exact_match"] - before["eval/exact_match"] >= -0.05
    )
