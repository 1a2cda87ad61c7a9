"""Ctrl-C (SIGINT) and SIGTERM during training: a checkpoint at the current step, then a resume
that continues the same curve."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from toolbox.core.errors import TrainingInterrupted
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

STEPS = [
    "trainer.max_steps=12",
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


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_at_step_n_checkpoints_step_n_and_resume_continues(tiny_overrides, tmp_path, sig, code):
    run_dir = tmp_path / "run"
    run = [*tiny_overrides, *STEPS, f"run_dir={run_dir}"]
    first = _build(run)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 7 and os.kill(os.getpid(), sig))
    # the handler before fit: Python's default, or SIG_IGN where the process started with the signal
    # ignored (a job started in the background by a non-interactive shell, as `cmd &` does)
    before = signal.getsignal(sig)
    with pytest.raises(TrainingInterrupted, match="at step 7: checkpoint saved") as caught:
        first.trainer.fit()
    assert caught.value.exit_code == code
    assert first.trainer.step == 7
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_00000007"]  # no temp folder left
    assert not (run_dir / "model").exists()  # an interrupted run does not look finished
    assert before is not None and signal.getsignal(sig) == before  # the previous handler is back

    second = _build([*run, "resume_from=auto"])
    started = []
    second.trainer.bus.subscribe(Event.FIT_START, lambda d: started.append(d.payload["resumed_from"]))
    second.trainer.fit()
    assert started == [7] and second.trainer.step == 12
    reference = _build([*tiny_overrides, *STEPS, f"run_dir={tmp_path / 'ref'}"])
    reference.trainer.fit()
    want, got = _weights(reference), _weights(second)
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_ctrl_c_of_toolbox_train_leaves_a_checkpoint_at_the_last_logged_step(tiny, tmp_path):
    run_dir = tmp_path / "run"
    args = [
        *tiny,
        "trainer.max_steps=100000",
        "trainer.save_every=0",
        "callbacks=default",
        "~callbacks.console",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolbox.cli", "train", *args, f"run_dir={run_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: SIGINT at step ")
    last = max(json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"step"' in line)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step_{last:08d}"]
    assert f"at step {last}:" in stderr
