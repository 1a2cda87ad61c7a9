"""The toolbox command as a user types it (subprocesses)."""

import json
import subprocess
import sys

TOOLBOX = [sys.executable, "-m", "toolbox.cli"]


def run(*args, check=True):
    return subprocess.run([*TOOLBOX, *args], capture_output=True, text=True, check=check, timeout=600)


def test_help_imports_no_heavy_library():
    code = "import sys, toolbox.cli as c; c.build_parser(); print(sorted(m for m in ('torch', 'transformers', 'hydra') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert "compose" in run("--help").stdout


def test_compose_prints_and_writes(tmp_path):
    out = run("compose", "experiment=sft_arith", "trainer.max_steps=9").stdout
    assert "run_name: sft_arith" in out and "max_steps: 9" in out
    target = tmp_path / "c.yaml"
    run("compose", "experiment=sft_arith", "--out", str(target))
    assert target.read_text().startswith("run_name: sft_arith")


def test_bad_input_is_one_line_error_without_traceback():
    proc = run("train", "optimizer.name=adamv", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: optimizer.name: unknown optimizer 'adamv'. Did you mean 'adamw'?")
    assert "Traceback" not in proc.stderr


def test_data_train_eval_plot_stages(tmp_path, tiny):
    config, data, run_dir = tmp_path / "config.yaml", tmp_path / "data", tmp_path / "run"
    run(
        "compose",
        *tiny,
        "trainer.max_steps=6",
        "trainer.eval_every=3",
        "callbacks=default",
        "eval=generation",
        "eval.exact_match.max_examples=8",
        "--out",
        str(config),
    )
    summary = json.loads(run("data", "--config", str(config), "--out", str(data)).stdout)
    assert summary["train"] == 256 and summary["test"] == 32
    assert {p.name for p in data.iterdir()} == {"train.jsonl", "test.jsonl", "facts.json", "tokenizer"}
    train = run("train", "--config", str(config), "--data", str(data), "--out", str(run_dir))
    final = json.loads(train.stdout.strip().splitlines()[-1])
    assert final["run_dir"] == str(run_dir)
    metrics = json.loads(run("eval", "--run", str(run_dir), "--out", str(tmp_path / "eval.json")).stdout)
    assert json.loads((tmp_path / "eval.json").read_text()) == metrics
    assert metrics["eval/loss"] == final["eval/loss"]  # the exported model is the trained one
    assert metrics["eval/exact_match"] == final["eval/exact_match"]
    pngs = run("plot", str(run_dir)).stdout.split()
    assert any(p.endswith("loss.png") for p in pngs)


def test_catalog_lists_every_registry_with_fields():
    text = run("catalog").stdout
    for heading in ("## model", "## optimizer", "## callback", "## trainer", "## source", "## tokenizer"):
        assert heading in text
    assert "### `optimizer: adamw`" in text
    assert "| `weight_decay` | `float` | `0.0` | decoupled weight decay" in text
    assert "### `model: tiny_llama`" in text
