"""A TRL (SFTTrainer) run under torchrun really trains as 2 processes on CPU.

HF Trainer on CPU silently trains each rank alone (world size 1) unless ``use_cpu=True``; the worker
script checks the world size from torch.distributed, the Trainer and accelerate, that the 2 ranks
end on identical weights (gradients were averaged), and that the epoch counter advanced by the
global batch (2 ranks x 4 examples per step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolbox.distributed.process_group import free_port

SCRIPT = Path(__file__).resolve().parent / "trl_sft_worker.py"


def test_trl_sft_under_torchrun_trains_on_two_processes(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "result.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--rdzv-backend=static",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(SCRIPT), str(out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["dist_world_size"] == 2
    assert result["trainer_world_size"] == 2
    assert result["accelerate_processes"] == 2
    assert result["without_use_cpu_world_size"] == 1  # the pitfall use_cpu=True avoids
    assert result["steps"] == 3
    assert result["epoch"] == pytest.approx(3 * 4 * 2 / result["num_examples"])  # global batch of 8
    first, second = result["rank_weight_sums"]
    assert first == second  # DDP kept the ranks' weights identical
