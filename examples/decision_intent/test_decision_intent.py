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


def test_the_readme_table_is_rendered_from_the_committed_runs():
    """The README's results table is ``run.py --table`` of the results.json files it names (kept in
    examples/decision_intent/results/), not typed by hand."""
    import importlib.util
    import json
    import re
    from pathlib import Path

    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("decision_intent_run", here / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    readme = (here / "README.md").read_text()
    block = re.search(
        r"<!-- table: python examples/decision_intent/run.py --table (.+?) -->\n(.*?)<!-- /table -->",
        readme,
        re.S,
    )
    assert block, "the README's results table lost its markers"
    results = [json.loads((here.parents[1] / f).read_text()) for f in block.group(1).split()]
    assert block.group(2) == run.table(results)
    after = [r["after"] for result in results for r in result["runs"]]
    assert len(after) >= 4 and all(a["raw_accuracy"] >= 0.95 and a["raw_flip_rate"] <= 0.05 for a in after)
