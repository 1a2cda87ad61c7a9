"""Resuming: bitwise-identical weights, SIGKILL mid-save, corrupt checkpoints."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from toolbox.core.errors import CheckpointError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

STEPS = [
    "trainer.max_steps=20",
    "trainer.save_every=10",
    "trainer.eval_every=0",
    "callbacks=default",
    "~callbacks.console",
    "model.dropout=0.1",
]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _weights(parts):
    return {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


@pytest.fixture
def reference(tiny_overrides, tmp_path):
    """The uninterrupted run's final weights."""
    parts = _build([*tiny_overrides, *STEPS, f"run_dir={tmp_path / 'reference'}"])
    parts.trainer.fit()
    return _weights(parts)


def _assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_resumed_run_is_bitwise_identical(tiny_overrides, tmp_path, reference):
    run = [*tiny_overrides, *STEPS, f"run_dir={tmp_path / 'interrupted'}"]
    first = _build(run)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 10 and d.trainer.request_stop("test"))
    first.trainer.fit()
    assert first.trainer.step == 10

    second = _build([*run, "resume_from=auto"])
    started = []
    second.trainer.bus.subscribe(Event.FIT_START, lambda d: started.append(d.payload["resumed_from"]))
    second.trainer.fit()
    assert started == [10]
    _assert_bitwise_equal(_weights(second), reference)


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import toolbox.core.checkpointer as ck
    real = ck._sha256
    def dying_sha256(path):
        if "step_00000020" in str(path.parent):  # state.pt of step 20 written, not yet committed
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path)
    ck._sha256 = dying_sha256
    from toolbox.experiment import load_config, run_experiment
    run_experiment(load_config(sys.argv[1:]))
""")


def test_sigkill_during_save_resumes_from_last_complete_checkpoint(tiny_overrides, tmp_path):
    run_dir = tmp_path / "killed"
    steps = [*STEPS, "trainer.max_steps=30"]
    run = [*tiny_overrides, *steps, f"run_dir={run_dir}"]
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, *run], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if not p.name.startswith(".")) == ["step_00000010"]
    assert any(p.name.startswith(".tmp-step_00000020") for p in ckpts.iterdir())  # the half-written save
    assert not (run_dir / "model").exists()  # nothing looks finished

    resumed = _build([*run, "resume_from=auto"])
    started = []
    resumed.trainer.bus.subscribe(Event.FIT_START, lambda d: started.append(d.payload["resumed_from"]))
    resumed.trainer.fit()
    assert started == [10]
    reference = _build([*tiny_overrides, *steps, f"run_dir={tmp_path / 'ref30'}"])
    reference.trainer.fit()
    _assert_bitwise_equal(_weights(resumed), _weights(reference))


def test_corrupt_checkpoint_falls_back_to_the_previous_one(tiny_overrides, tmp_path):
    run = [*tiny_overrides, *STEPS, "callbacks.checkpoint.keep_last=0", f"run_dir={tmp_path / 'c'}"]
    _build(run).trainer.fit()
    newest = tmp_path / "c" / "checkpoints" / "step_00000020" / "state.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    resumed = _build([*run, "resume_from=auto", "trainer.max_steps=25"])
    started = []
    resumed.trainer.bus.subscribe(Event.FIT_START, lambda d: started.append(d.payload["resumed_from"]))
    resumed.trainer.fit()
    assert started == [10]  # never a silent restart from step 0


def test_every_checkpoint_corrupt_is_an_error(tiny_overrides, tmp_path):
    run = [*tiny_overrides, *STEPS, "trainer.max_steps=10", f"run_dir={tmp_path / 'd'}"]
    _build(run).trainer.fit()
    for state in (tmp_path / "d" / "checkpoints").glob("*/state.pt"):
        os.truncate(state, 100)
    resumed = _build([*run, "resume_from=auto"])
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        resumed.trainer.fit()


def test_failed_resume_leaves_config_yaml_as_it_was(tiny_overrides, tmp_path):
    run = [*tiny_overrides, *STEPS, "trainer.max_steps=10", f"run_dir={tmp_path / 'e'}"]
    _build(run).trainer.fit()
    config = tmp_path / "e" / "config.yaml"
    before = config.read_text()
    for state in (tmp_path / "e" / "checkpoints").glob("*/state.pt"):
        os.truncate(state, 100)
    resumed = _build([*run, "resume_from=auto", "optimizer.lr=0.005"])
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        resumed.trainer.fit()
    assert config.read_text() == before and "lr: 0.005" not in before  # not the failed run's config


def _snapshot(root):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def test_resuming_a_finished_run_changes_nothing(tiny_overrides, tmp_path):
    """A finished run (final checkpoint at max_steps) resumed: no step, no metrics line, no file
    rewritten, so Snakemake and `dvc status` see no change; fit returns the final evaluation."""
    run = [*tiny_overrides, *STEPS, "trainer.max_steps=10", f"run_dir={tmp_path / 'f'}"]
    final = _build(run).trainer.fit()
    before = _snapshot(tmp_path / "f")
    assert any(p.name == "metrics.jsonl" for p in before) and any(p.name == "config.yaml" for p in before)
    resumed = _build([*run, "resume_from=auto"])
    steps = []
    resumed.trainer.bus.subscribe(Event.STEP_END, steps.append)
    again = resumed.trainer.fit()
    assert steps == [] and resumed.trainer.step == 10
    assert again == final and "eval/loss" in again
    assert _snapshot(tmp_path / "f") == before


def test_resuming_a_finished_run_whose_model_was_deleted_writes_the_same_model(tiny_overrides, tmp_path):
    """Snakemake and DVC delete a stage's outputs before they rerun it: the resumed finished run
    writes model/ again, byte for byte as before, and appends nothing else."""
    import shutil

    run = [*tiny_overrides, *STEPS, "trainer.max_steps=10", f"run_dir={tmp_path / 'g'}"]
    _build(run).trainer.fit()
    before = _snapshot(tmp_path / "g")
    model = tmp_path / "g" / "model"
    exported = {p.relative_to(model): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert "model.safetensors" in {p.name for p in exported}
    shutil.rmtree(model)
    _build([*run, "resume_from=auto"]).trainer.fit()
    assert {p.relative_to(model): p.read_bytes() for p in model.rglob("*") if p.is_file()} == exported
    after = _snapshot(tmp_path / "g")
    assert {p: v for p, v in after.items() if model not in p.parents} == {
        p: v for p, v in before.items() if model not in p.parents
    }
