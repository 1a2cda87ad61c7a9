"""toolbox matrix: one point of a tiny recipe, its files, and a rerun that skips it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolbox.core.errors import ConfigError
from toolbox.results.matrix import parse_seeds, run_matrix

TINY = [
    "experiment=demo",
    "trainer.max_steps=2",
    "trainer.eval_every=2",
    "trainer.save_every=2",
    "data.source.num_train=64",
    "data.source.num_test=8",
    "eval.exact_match.max_examples=4",
    "device=cpu",
]


def test_a_point_trains_evaluates_and_is_not_run_twice(tmp_path: Path) -> None:
    expect = {"eval/exact_match": {"min": 0.0}}
    (point,) = run_matrix("tiny", [TINY], tmp_path, [3], ["exact"], [1], jobs=1, nice=0, expect=expect)
    assert point == tmp_path / "s3-exact-t1"
    record = json.loads((point / "run.json").read_text())
    assert (record["seed"], record["forward"], record["threads"], record["expect"]) == (3, "exact", 1, expect)
    assert record["train_cpu_minutes"][0] > 0
    assert 0.0 <= json.loads((point / "eval.json").read_text())["eval/exact_match"] <= 1.0
    log = (point / "log.txt").read_text()
    assert "seed=3 num_threads=1 trainer.forward=exact" in log
    run_matrix("tiny", [TINY], tmp_path, [3], ["exact"], [1], jobs=1, nice=0)
    assert (point / "log.txt").read_text() == log  # finished: skipped


def test_seeds_and_forwards_are_checked() -> None:
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4] and parse_seeds("0,2") == [0, 2]
    with pytest.raises(ConfigError, match="--seeds"):
        parse_seeds("a-b")
    with pytest.raises(ConfigError, match="--forwards"):
        run_matrix("x", [TINY], Path("/nonexistent"), [0], ["fast"], [1])
