"""The train stage keeps its checkpoints only for the same training: the same train slice, the same
data and the same starting model (workflow/scripts/resume_key.py, TRAIN_CMD in workflow/stages.py).
A data folder or an init_from model rebuilt upstream under the same path used to leave the old
checkpoints in place, and a finished run then "resumed" and reported the old model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "workflow" / "scripts"))

import stages  # noqa: E402
from resume_key import resume_key  # noqa: E402


def _inputs(root: Path, model_path: str) -> tuple[Path, Path, Path]:
    data, model = root / "data", root / "start_model"
    (data / "train").mkdir(parents=True)
    (data / "train" / "rows.arrow").write_bytes(b"rows v1")
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    cfg = root / "train.yaml"
    cfg.write_text(f"model:\n  name: pretrained\n  path: {model_path}\ntrainer:\n  lr: 0.001\n")
    return cfg, data, model


def test_the_key_follows_the_slice_the_data_and_the_starting_model(tmp_path):
    cfg, data, model = _inputs(tmp_path, str(tmp_path / "start_model"))
    first = resume_key(cfg, data)
    assert resume_key(cfg, data) == first  # nothing changed: the same key
    (data / "train" / "rows.arrow").write_bytes(b"rows v2")  # same path, same size, other content
    second = resume_key(cfg, data)
    assert second != first
    (model / "model.safetensors").write_bytes(b"weights v2")
    third = resume_key(cfg, data)
    assert third != second
    cfg.write_text(cfg.read_text().replace("0.001", "0.002"))
    assert resume_key(cfg, data) != third


def test_a_hub_id_is_not_a_folder_and_a_missing_data_folder_is_named(tmp_path):
    cfg, data, _ = _inputs(tmp_path, "org/some-model")
    key = resume_key(cfg, tmp_path / "nowhere")
    assert "org/some-model" in key.split("# inputs")[0]  # only in the slice's own text
    assert f"{tmp_path / 'nowhere'} missing" in key


def test_the_train_command_drops_checkpoints_when_the_data_changed(tmp_path):
    """TRAIN_CMD itself, with a stand-in `toolbox` that reports which checkpoints it found."""
    cfg, data, _ = _inputs(tmp_path, str(tmp_path / "start_model"))
    run_dir, checkpoints = tmp_path / "train", tmp_path / "train" / "checkpoints"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "toolbox"
    fake.write_text(f'#!/bin/sh\nls {checkpoints} 2>/dev/null | tr "\\n" " " > {tmp_path / "seen"}\n')
    fake.chmod(0o755)
    command = stages.TRAIN_CMD.format(
        train_cfg=cfg,
        data=data,
        run_dir=run_dir,
        resume_key=run_dir / "checkpoints.config.yaml",
        checkpoints=checkpoints,
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }

    def train() -> str:
        subprocess.run(["bash", "-c", command], cwd=REPO, env=env, check=True)
        return (tmp_path / "seen").read_text().strip()

    assert train() == ""  # the first run: no checkpoints
    (checkpoints / "step_3").mkdir(parents=True)  # it was interrupted after step 3
    assert train() == "step_3"  # same slice, same data: resume
    (data / "train" / "rows.arrow").write_bytes(b"rows v2")  # data rebuilt upstream, same path
    assert train() == ""  # another training: the old checkpoints are gone
