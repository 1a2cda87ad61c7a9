"""`toolbox plot A B`: runs overlaid, one PNG per metric; a run's eval.json (its headline metric) drawn."""

from __future__ import annotations

import json

import pytest

from toolbox.cli import main
from toolbox.core.errors import DataError
from toolbox.eval.compare_plot import _labels, _run_groups, compare_runs
from toolbox.eval.plot import final_eval, plot_metrics

PNG = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir, scale=1.0, steps=20, exact_match=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"step": s, "split": "train", "loss": scale * 3.0 / s, "lr": 1e-3} for s in range(1, steps + 1)]
    lines += [{"step": s, "split": "eval", "eval/loss": scale * 3.5 / s} for s in (10, 20)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if exact_match is not None:
        (run_dir / "eval.json").write_text(
            json.dumps({"exact_match": exact_match, "before/exact_match": 0.1})
        )


def test_two_runs_overlaid_one_png_per_metric_with_the_headline_metric(tmp_path, capsys):
    write_run(tmp_path / "a" / "demo", exact_match=0.9)
    write_run(tmp_path / "b" / "demo", scale=2.0, exact_match=0.4)
    out = tmp_path / "cmp"
    assert main(["plot", str(tmp_path / "a" / "demo"), str(tmp_path / "b" / "demo"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(p.rsplit("/", 1)[-1] for p in printed) == ["exact_match.png", "loss.png", "lr.png"]
    for path in printed:
        assert open(path, "rb").read(8) == PNG
    groups, final = _run_groups(tmp_path / "b" / "demo")
    assert final == {
        "exact_match": [("eval/exact_match", "final", [(20, 0.4)])]
    }  # before/... is not headline
    assert [label for label, _, _ in groups["loss"]] == ["loss", "eval/loss"]


def test_legend_labels_differ_and_missing_runs_are_named(tmp_path):
    assert _labels([tmp_path / "a" / "demo", tmp_path / "b" / "demo"]) == ["a/demo", "b/demo"]
    assert _labels([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]
    with pytest.raises(DataError, match="no metrics.jsonl or eval.json"):
        compare_runs([tmp_path / "nothing", tmp_path / "none"], tmp_path / "out")


def test_one_run_plot_draws_its_eval_json_as_the_last_eval_point(tmp_path):
    run = tmp_path / "run"
    write_run(run, exact_match=0.75)
    assert final_eval(run, 20) == {"eval/exact_match": [(20, 0.75)]}
    names = sorted(p.name for p in plot_metrics(run))
    assert "eval_exact_match.png" in names
