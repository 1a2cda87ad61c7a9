"""A run folder belongs to one configuration: the README's commands in order never mix two runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from toolbox.core.errors import ConfigError
from toolbox.experiment import load_config
from toolbox.experiment.run_folder import claim_run_folder

TOOLBOX = [sys.executable, "-m", "toolbox.cli"]


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOLBOX, "train", *args], capture_output=True, text=True, timeout=600)


def test_the_readme_sequence_keeps_each_run_in_its_own_folder(tmp_path, tiny):
    """sft_arith, then the same with other settings, then resume_from=auto: the second is refused
    (naming what differs), --new-folder trains beside it, the resume continues the first."""
    run_dir = tmp_path / "sft_arith"
    base = [
        "experiment=sft_arith",
        *tiny,
        "trainer.max_steps=2",
        "trainer.eval_every=0",
        "--out",
        str(run_dir),
    ]
    first = train(*base)
    assert first.returncode == 0, first.stderr
    state = (run_dir / "checkpoints" / "step_00000002" / "state.pt").read_bytes()

    other = train(*base, "trainer.max_steps=3", "optimizer=sgd")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    (line,) = other.stderr.strip().splitlines()
    assert line.startswith(f"error: {run_dir} holds a run of another configuration (")
    assert "trainer.max_steps: 2 -> 3" in line and "optimizer: adamw -> sgd" in line
    assert "--new-folder" in line and "--overwrite" in line
    assert (run_dir / "checkpoints" / "step_00000002" / "state.pt").read_bytes() == state  # untouched

    beside = train(*base, "trainer.max_steps=3", "optimizer=sgd", "--new-folder")
    assert beside.returncode == 0, beside.stderr
    assert json.loads(beside.stdout.splitlines()[-1])["run_dir"] == f"{run_dir}-2"
    assert "name: sgd" in (tmp_path / "sft_arith-2" / "config.yaml").read_text()

    again = train(*base, "resume_from=auto")  # the same configuration: finished, nothing to train
    assert again.returncode == 0, again.stderr
    extended = train(*base, "resume_from=auto", "trainer.max_steps=3")  # a resume may train longer
    assert extended.returncode == 0, extended.stderr
    assert "max_steps: 3" in (run_dir / "config.yaml").read_text()

    replaced = train(*base, "optimizer=sgd", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert "name: sgd" in (run_dir / "config.yaml").read_text()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_00000002"]


def test_an_old_configuration_that_left_nothing_is_reused(tmp_path, tiny):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    old = load_config(["experiment=sft_arith", *tiny, "trainer.max_steps=99"])
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(old, resolve=True))
    cfg = load_config(["experiment=sft_arith", *tiny, f"run_dir={run_dir}"])
    assert claim_run_folder(cfg) is cfg  # no checkpoints, model or eval.json: nothing to mix with
    (run_dir / "eval.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"configuration \(trainer\.max_steps: 99 -> \d+\)"):
        claim_run_folder(cfg)


def test_a_file_as_run_folder_and_a_bad_policy_are_named(tmp_path, tiny):
    path = tmp_path / "file"
    path.write_text("x")
    cfg = load_config(["experiment=sft_arith", *tiny, f"run_dir={path}"])
    with pytest.raises(ConfigError, match="is a file, not a run folder"):
        claim_run_folder(cfg)
    with pytest.raises(ConfigError, match="expected one of refuse, new, overwrite"):
        claim_run_folder(cfg, "keep")
