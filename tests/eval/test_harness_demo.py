"""Parity on the demo model: toolbox's exact match, lm-eval's and inspect_ai's are the same number,
whichever way the harness reaches the model (transformers generate, our engine, ``toolbox serve``).

The default suite runs the demo config stopped at step 500 (``SHORT_DEMO``); the full demo
(``toolbox demo``, 2,500 steps) is the slow test.
"""

from __future__ import annotations

import pytest

from tests.eval.harness_util import EXACT, run_eval, trained_exact_match

pytest.importorskip("lm_eval")
pytest.importorskip("inspect_ai")

LM = "eval/lm_eval/arithmetic/exact_match"
INSPECT = "eval/inspect_ai/arithmetic/exact_match"


def three_numbers(run, tmp_path, *route: str) -> tuple[float, dict, dict]:
    own = run_eval(run, out=tmp_path / "own.json")[EXACT]
    lm = run_eval(run, "backend=lm_eval", "task=arithmetic", *route, out=tmp_path / "lm.json")
    inspect = run_eval(run, "backend=inspect_ai", "task=arithmetic", *route, out=tmp_path / "inspect.json")
    return own, lm, inspect


def test_short_demo_exact_match_equal_in_three_harnesses(demo_short, offline, tmp_path):
    own, lm, inspect = three_numbers(demo_short, tmp_path)
    assert own == trained_exact_match(demo_short)  # what training logged at its last evaluation
    assert 0 < own < 1  # some problems right, some wrong: equal numbers mean equal counts of both
    assert lm == {LM: own}
    assert inspect == {INSPECT: own}


def test_engine_torch_gives_the_same_exact_match(demo_short, offline, tmp_path):
    own, lm, inspect = three_numbers(demo_short, tmp_path, "engine=torch")
    assert lm == {LM: own}
    assert inspect == {INSPECT: own}


def test_through_toolbox_serve_on_loopback(demo_short, offline, tmp_path):
    """The http route: our own server on a free loopback port, stopped by its PID."""
    from tests.serving.conftest import free_port
    from tests.serving.server_util import start_server

    server = start_server(demo_short / "model", free_port(), tmp_path / "serve.log")
    try:
        own, lm, inspect = three_numbers(demo_short, tmp_path, f"base_url={server.base_url}")
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-3000:]
    assert "Traceback" not in server.log.read_text()
    assert lm == {LM: own}
    assert inspect == {INSPECT: own}


@pytest.mark.slow  # the whole demo: 2,500 steps, minutes on 2 cores
def test_full_demo_exact_match_equal_in_three_harnesses(tmp_path_factory, offline, tmp_path):
    from toolbox.cli import main

    run = tmp_path_factory.mktemp("full_demo") / "demo"
    assert main(["demo", "device=cpu", f"run_dir={run}"]) == 0
    own, lm, inspect = three_numbers(run, tmp_path)
    assert own == trained_exact_match(run)
    assert lm == {LM: own}
    assert inspect == {INSPECT: own}


def test_a_harness_metric_in_the_eval_stage_feeds_expect(demo_short, offline, tmp_path, capsys):
    """Item 4: the workflow's eval stage runs a harness task as one more evaluator (a run's
    ``+eval.harness=...`` override reaches its eval slice; here the same node is set on the run's
    config), so its metric lands in eval.json beside toolbox's own, and the check stage
    (``toolbox check``) holds it to the run's ``expect:`` like any other."""
    import json

    from toolbox.cli import main

    harness = "eval.harness={name: lm_eval, task: arithmetic, max_examples: 200}"
    metrics = run_eval(demo_short, harness, out=tmp_path / "eval.json")
    assert metrics[LM] == metrics[EXACT]  # the harness beside toolbox's own, the same number
    eval_json = str(tmp_path / "eval.json")

    def check(rule: dict) -> int:
        return main(["check", "--eval", eval_json, "--expect", json.dumps({LM: rule}), "--run", "demo"])

    assert check({"min": metrics[LM]}) == 0
    assert LM in capsys.readouterr().out
    assert check({"min": metrics[LM] + 0.5}) == 1
    err = capsys.readouterr().err
    assert "does not reach what it declares" in err and LM in err
