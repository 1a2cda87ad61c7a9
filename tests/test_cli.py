"""The toolbox command as a user types it (subprocesses)."""

import json
import re
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
    proc = run("train", "optimizer.name=adamww", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: optimizer.name: unknown optimizer 'adamww'. Did you mean 'adamw'?")
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


def test_eval_scores_a_preference_run_against_its_reference(tmp_path):
    """A DPO run's eval JSON holds the held-out preference accuracy its trainer reported, against
    the model it started from; that model, as --before, is its own reference: accuracy 0."""
    small = ["data.source.num_train=64", "data.source.num_test=16", "device=cpu", "trainer.batch_size=8"]
    sft, dpo = tmp_path / "sft", tmp_path / "dpo"
    model = ["model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128"]
    run(
        "train",
        "experiment=sft_arith",
        *model,
        *small,
        "trainer.max_steps=3",
        "trainer.eval_every=0",
        f"run_dir={sft}",
    )
    start = [f"model.path={sft / 'model'}", f"tokenizer.path={sft / 'model'}"]
    common = [*small, "data.source.max_test=16", "eval.exact_match.max_examples=4"]
    steps = [
        "trainer.max_steps=3",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        "scheduler.warmup_steps=0",
    ]
    train = run("train", "experiment=dpo_arith", *start, *common, *steps, f"run_dir={dpo}")
    final = json.loads(train.stdout.strip().splitlines()[-1])
    out = tmp_path / "eval.json"
    metrics = json.loads(
        run("eval", "--run", str(dpo), "--before", str(sft / "model"), "--out", str(out)).stdout
    )
    assert 0 < metrics["eval/accuracy"] <= 1
    for key in ("eval/accuracy", "eval/margin", "eval/loss", "eval/exact_match"):
        assert abs(metrics[key] - final[key]) < 1e-6, key
    assert metrics["before/eval/accuracy"] == 0.0 and metrics["before/eval/margin"] == 0.0
    assert metrics["gain/eval/accuracy"] == metrics["eval/accuracy"]


def test_catalog_lists_every_registry_with_fields():
    text = run("catalog").stdout
    for heading in ("## model", "## optimizer", "## callback", "## trainer", "## source", "## tokenizer"):
        assert heading in text
    assert "### `optimizer: adamw`" in text
    # module:line
    assert re.search(r"`toolbox/trainer/optim\.py:\d+` — AdamW with decoupled weight decay", text)
    assert "| `weight_decay` | `float >= 0` | `0.0` | decoupled weight decay" in text
    assert "### `model: tiny_llama`" in text


def test_overrides_after_the_options(tmp_path, tiny):
    """The README's and the workflow's commands: overrides may follow --out and --config."""
    target = tmp_path / "x.yaml"
    run("compose", "experiment=sft_arith", "--out", str(target), "trainer.max_steps=7", "seed=3")
    assert "max_steps: 7" in target.read_text() and "seed: 3" in target.read_text()
    run_dir = tmp_path / "run"
    tiny = [o for o in tiny if o != "callbacks=none"] + ["callbacks=default", "~callbacks.console"]
    args = ["train", "experiment=sft_arith", *tiny, "--out", str(run_dir), "resume_from=auto"]
    first = json.loads(run(*args, "trainer.max_steps=2", "trainer.eval_every=0").stdout.splitlines()[-1])
    assert first["run_dir"] == str(run_dir) and "resume_from: auto" in (run_dir / "config.yaml").read_text()
    lines = (run_dir / "metrics.jsonl").read_text()
    again = json.loads(run(*args, "trainer.max_steps=2", "trainer.eval_every=0").stdout.splitlines()[-1])
    assert again == first and (run_dir / "metrics.jsonl").read_text() == lines  # finished: nothing appended
    proc = run("compose", "experiment=sft_arith", "--out", str(target), "--bogus", check=False)
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr


def test_unset_value_and_empty_data_file_are_named(tmp_path):
    proc = run("train", "data=local", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "error: data.source.path is required (source 'local_files', path: the data file"
    )
    assert "set data.source.path=..." in proc.stderr
    empty = tmp_path / "train.jsonl"
    empty.write_text("")
    proc = run("train", "data=local", f"data.source.path={empty}", check=False)
    assert proc.returncode == 2
    assert f"data.source.path: {empty} is empty (no records)" in proc.stderr
