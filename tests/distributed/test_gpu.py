"""DDP and FSDP on a CUDA GPU with nccl and bf16 (benchmarks/gpu_smoke.py); skipped without CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SMOKE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_smoke.py"

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU visible (nccl/bf16 checks need one)"
)


def test_ddp_and_fsdp_smoke_on_one_gpu_with_nccl_and_bf16(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SMOKE), "--steps", "10", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{") :])
    for strategy in ("ddp", "fsdp"):
        assert result[strategy]["ok"], result[strategy]
        assert result[strategy]["backend"] == "nccl"


def test_fsdp_casts_parameters_to_bf16_for_compute(tmp_path):
    from toolbox.core.context import RunContext
    from toolbox.distributed.fsdp import FSDP

    strategy = FSDP(RunContext(tmp_path, device="cuda:0"), mixed_precision="bf16")
    policy = strategy._mp_policy()
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32
    assert strategy.backend == "nccl"
