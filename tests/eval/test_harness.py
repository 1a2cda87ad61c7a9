"""lm_eval and inspect_ai backends offline on a tiny trained arithmetic model; the harness_eval callback."""

from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("inspect_ai")

TINY = [
    "experiment=sft_arith",
    "model.hidden_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=128",
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


@pytest.fixture
def offline(monkeypatch):
    """Hub variables offline, and any connection outside loopback an error."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if (
            isinstance(host, str)
            and host not in ("127.0.0.1", "::1", "localhost")
            and self.family != socket.AF_UNIX
        ):
            raise AssertionError(f"network call to {address}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def _eval(run, *overrides, tmp_path):
    from toolbox.cli import main

    out = tmp_path / f"eval-{len(list(tmp_path.iterdir()))}.json"
    assert main(["eval", "--run", str(run), "--out", str(out), *overrides]) == 0
    return json.loads(out.read_text())


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
    from pathlib import Path

    path = Path("../shared/data/gsm8k/train.jsonl")
    if not path.is_file():
        pytest.skip(f"{path} is absent (the GSM8K copy of ../shared/data)")
    got = _eval(run, "backend=lm_eval", "task=gsm8k", "max_examples=3", tmp_path=tmp_path)
    assert (
        set(got) == {"eval/lm_eval/gsm8k/exact_match"} and 0.0 <= got["eval/lm_eval/gsm8k/exact_match"] <= 1.0
    )


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
