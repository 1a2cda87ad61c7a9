"""lm_eval and inspect_ai backends offline on a tiny trained arithmetic model; the harness_eval callback."""

from __future__ import annotations

import json

import pytest

from tests.eval.harness_util import run_eval

pytest.importorskip("lm_eval")
pytest.importorskip("inspect_ai")

TINY = [
    "experiment=sft_arith",
    "model.hidden_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=128",
    "model.max_position_embeddings=1024",  # a GSM8K prompt (~370 chars) and 256 generated
    "data.source.num_train=2000",
    "data.source.num_test=24",
    "trainer.max_steps=300",
    "trainer.eval_every=300",
    "trainer.save_every=150",
    "device=cpu",
    "eval.exact_match.max_examples=24",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny sft_arith run whose training evaluates lm_eval's arithmetic task at every checkpoint."""
    from toolbox.cli import main

    run_dir = tmp_path_factory.mktemp("harness") / "run"
    callback = "+callbacks.harness={name: harness_eval, backend: lm_eval, task: arithmetic, max_examples: 24}"
    assert main(["train", *TINY, callback, f"run_dir={run_dir}"]) == 0
    return run_dir


def _eval(run, *overrides, tmp_path):
    return run_eval(run, *overrides, out=tmp_path / f"eval-{len(list(tmp_path.iterdir()))}.json")


def test_backends_agree_with_exact_match_offline(run, offline, tmp_path):
    own = _eval(run, tmp_path=tmp_path)["eval/exact_match"]
    lm = _eval(run, "backend=lm_eval", "task=arithmetic", tmp_path=tmp_path)
    inspect = _eval(run, "backend=inspect_ai", "task=arithmetic", tmp_path=tmp_path)
    assert lm == {"eval/lm_eval/arithmetic/exact_match": own}
    assert inspect == {"eval/inspect_ai/arithmetic/exact_match": own}


def test_user_task_yaml_with_local_data(run, offline, tmp_path):
    data = tmp_path / "mine.jsonl"
    from toolbox.eval.harness.tasks import TASKS_DIR

    data.write_text("".join(json.dumps({"prompt": "07+45=", "completion": "250"}) + "\n" for _ in range(3)))
    text = (TASKS_DIR / "arithmetic.yaml").read_text().replace("task: arithmetic", "task: mine")
    task = tmp_path / "mine.yaml"
    task.write_text(text.replace("test: RECORDS", f"test: {data.name}"))
    got = _eval(run, "backend=lm_eval", f"task={task}", tmp_path=tmp_path)
    assert set(got) == {"eval/lm_eval/mine/exact_match"} and got["eval/lm_eval/mine/exact_match"] in (
        0.0,
        1.0,
    )


def test_unknown_backend_and_hub_task_fail_clearly(run, tmp_path, capsys):
    from toolbox.cli import main

    assert main(["eval", "--run", str(run), "backend=helm", "task=arithmetic"]) == 2
    assert (
        "backend=helm: unknown evaluation backend; use one of: lm_eval, inspect_ai" in capsys.readouterr().err
    )
    hub = tmp_path / "hub.yaml"
    hub.write_text("task: hub\ndataset_path: openai/gsm8k\n")
    assert main(["eval", "--run", str(run), "backend=lm_eval", f"task={hub}"]) == 2
    assert "dataset_path 'openai/gsm8k' is not local" in capsys.readouterr().err


def test_gsm8k_task_from_shared_data(run, offline, tmp_path):
    """GSM8K from the shared data folder (found from any checkout: tests/shared_data.py)."""
    from tests.shared_data import require_shared_data

    data = require_shared_data("gsm8k/train.jsonl")
    for backend in ("lm_eval", "inspect_ai"):
        got = _eval(
            run, f"backend={backend}", "task=gsm8k", f"gsm8k_path={data}", "max_examples=3", tmp_path=tmp_path
        )
        assert set(got) == {f"eval/{backend}/gsm8k/exact_match"}
        assert got[f"eval/{backend}/gsm8k/exact_match"] in (0.0, 1 / 3, 2 / 3, 1.0)


def test_gsm8k_task_reads_gsm8k_not_an_arithmetic_run(tmp_path):
    """An arithmetic run's records hold an ``answer`` too: task=gsm8k still reads GSM8K's held-out
    split from the file; a GSM8K run's own records are used as they are."""
    from tests.shared_data import require_shared_data
    from toolbox.data.sources.gsm8k import gsm8k
    from toolbox.eval.harness.tasks import resolve_task

    data = require_shared_data("gsm8k/train.jsonl")
    held_out = gsm8k(path=str(data)).test
    arithmetic = [{"prompt": "07+45=", "completion": "250", "answer": "52"}]
    task = resolve_task("gsm8k", arithmetic, tmp_path / "a", 3, str(data))
    assert task.records() == [{"prompt": r["prompt"], "answer": r["answer"]} for r in held_out[:3]]
    own = held_out[5:7]
    task = resolve_task("gsm8k", own, tmp_path / "b", None, str(tmp_path / "absent.jsonl"))
    assert task.records() == [{"prompt": r["prompt"], "answer": r["answer"]} for r in own]


def test_gsm8k_without_the_data_names_the_option(run, tmp_path, capsys):
    from toolbox.cli import main

    missing = tmp_path / "nowhere" / "train.jsonl"
    assert main(["eval", "--run", str(run), "backend=lm_eval", "task=gsm8k", f"gsm8k_path={missing}"]) != 0
    err = capsys.readouterr().err
    assert f"{missing} does not exist" in err and "set gsm8k_path=FILE" in err


def test_callback_writes_the_benchmark_curve(run):
    from toolbox.eval.plot import plot_metrics

    key = "eval/lm_eval/arithmetic/exact_match"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = sorted(r["step"] for r in lines if key in r)
    assert steps == [150, 300]  # the checkpoint at 150 and the final model
    final = next(r[key] for r in lines if key in r and r["step"] == 300)
    assert final == json.loads((run / "harness" / "step_00000300" / "eval.json").read_text())[key]
    assert not (run / "harness" / "step_00000150" / "model").exists()  # deleted once scored
    written = {p.name for p in plot_metrics(run)}
    assert "eval_lm_eval_arithmetic_exact_match.png" in written
