"""examples/decision_intent: both stages compose, train a few steps and report the decision metrics."""

from __future__ import annotations

from toolbox.experiment import load_config

TINY = [
    "data.source.num_train=48",
    "data.source.num_test=8",
    "trainer.batch_size=8",
    "eval.decision.max_examples=8",
    "~callbacks.console",
    "~callbacks.memory",
    "~callbacks.throughput",
    "device=cpu",
]
KEYS = {f"eval/{lvl}_{m}" for lvl in ("raw", "L0") for m in ("accuracy", "ece", "flip_rate", "coverage_at_5")}


def test_sft_then_distill_a_few_steps(tmp_path):
    from toolbox.experiment import run_experiment

    sft = run_experiment(
        load_config(
            ["experiment=decision_intent_sft", "trainer.max_steps=2", *TINY, f"run_dir={tmp_path / 'sft'}"]
        )
    )
    assert KEYS <= set(sft)
    model = tmp_path / "sft" / "model"
    distill = run_experiment(
        load_config(
            [
                "experiment=decision_intent",
                f"model.path={model}",
                f"tokenizer.path={model}",
                "trainer.max_steps=1",
                *TINY,
                f"run_dir={tmp_path / 'distill'}",
            ]
        )
    )
    assert KEYS <= set(distill)
    assert all(0.0 <= distill[k] <= 1.0 for k in KEYS)
