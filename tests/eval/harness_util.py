"""Helpers of the harness tests: ``toolbox eval`` on a run, and the demo shortened for the default suite."""

from __future__ import annotations

import json
from pathlib import Path

# the demo (experiment=demo: its model, data, seed and 200 scored problems) stopped at its first
# evaluation: still on its plateau, it gets a few of the 200 right (0.02), so equal scores count the
# same right and wrong answers, not only zeros; the full 2,500 steps are the slow test
SHORT_DEMO = [
    "experiment=demo",
    "trainer.max_steps=500",
    "trainer.eval_every=500",
    "trainer.save_every=500",
    "device=cpu",
]
EXACT = "eval/exact_match"


def run_eval(run: Path, *overrides: str, out: Path) -> dict[str, float]:
    """``toolbox eval --run RUN --out OUT overrides...`` in process; what it wrote."""
    from toolbox.cli import main

    assert main(["eval", "--run", str(run), "--out", str(out), *overrides]) == 0
    return json.loads(out.read_text())


def trained_exact_match(run: Path) -> float:
    """The last ``eval/exact_match`` the training itself logged."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r[EXACT] for r in lines if EXACT in r][-1]
