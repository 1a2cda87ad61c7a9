"""DDP and FSDP with 2 processes on CPU (gloo, torchrun) against one process with the same global batch.

Tolerances: the 2-process run reduces gradients in a different order than one process, so per-step
losses agree to rtol 1e-5 and final weights to atol 1e-5 (measured: ~1e-8 after 8 AdamW steps).
A checkpoint written by the 2-process run resumes in 1 process (``strategy=single``) and finishes on
the same weights as the uninterrupted 1-process run, to the same tolerance.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from toolbox.distributed.process_group import free_port

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "dist_curve.py"
sys.path.insert(0, str(HERE))
from dist_curve import run_curve  # noqa: E402

# the tests' TINY config, minus its batch size: 2 processes x 8 = 1 process x 16
BASE = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=128",
    "data.source.num_train=256", "data.source.num_test=32", "eval=lm", "device=cpu",
    "trainer.max_steps=8", "trainer.save_every=4", "trainer.eval_every=0",
    "callbacks=default", "~callbacks.console", "callbacks.checkpoint.keep_last=0",
]  # fmt: skip
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-5


def torchrun(out: Path, overrides: list[str], nproc: int = 2) -> dict:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--rdzv-backend=static",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(SCRIPT), str(out), *overrides,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """One process, batch 16: the curve the 2-process runs must follow."""
    run_dir = tmp_path_factory.mktemp("single") / "run"
    return run_curve([*BASE, "trainer.batch_size=16", f"run_dir={run_dir}"]) | {"run_dir": run_dir}


def assert_weights_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst < WEIGHT_ATOL, worst


def resume_in_one_process(tmp_path: Path, checkpoint: Path, reference: dict) -> None:
    resumed = run_curve(
        [*BASE, "trainer.batch_size=16", f"run_dir={tmp_path / 'resumed'}", f"resume_from={checkpoint}"]
    )
    assert resumed["world_size"] == 1
    np.testing.assert_allclose(resumed["losses"], reference["losses"][4:], rtol=LOSS_RTOL)
    assert_weights_close(resumed["weights"], reference["weights"])


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_follow_single_curve_and_resume_in_one(strategy, tmp_path, reference):
    run_dir = tmp_path / strategy
    dist = torchrun(
        tmp_path / "out.pt", [*BASE, f"strategy={strategy}", "trainer.batch_size=8", f"run_dir={run_dir}"]
    )
    assert dist["world_size"] == 2
    assert len(dist["losses"]) == 8
    np.testing.assert_allclose(dist["losses"], reference["losses"], rtol=LOSS_RTOL)
    assert dist["losses"][-1] < dist["losses"][0]  # it learns
    assert_weights_close(dist["weights"], reference["weights"])

    step4 = run_dir / "checkpoints" / "step_00000004"
    if strategy == "fsdp":  # sharded: every rank's shard plus DCP's metadata, all in the manifest
        assert (step4 / "sharded" / ".metadata").is_file()
        assert len(list((step4 / "sharded").glob("*.distcp"))) == 2
        assert "model" not in torch.load(step4 / "state.pt", weights_only=False)
    resume_in_one_process(tmp_path, step4, reference)

    # the consolidated export loads with from_pretrained in one process and generates like the reference
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    ref_model = AutoModelForCausalLM.from_pretrained(reference["run_dir"] / "model")
    assert type(model).__name__ == "LlamaForCausalLM"
    prompt = torch.tensor([[1, 5, 6, 7]])
    out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 10)
    assert torch.equal(out, ref_model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0))


@pytest.mark.slow  # ~35 s per strategy on a shared 2-core machine
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_process_checkpoint_resumes_in_two(strategy, tmp_path, reference):
    step4 = reference["run_dir"] / "checkpoints" / "step_00000004"
    overrides = [*BASE, f"strategy={strategy}", "trainer.batch_size=8", f"run_dir={tmp_path / 'run'}"]
    dist = torchrun(tmp_path / "out.pt", [*overrides, f"resume_from={step4}"])
    assert dist["world_size"] == 2
    np.testing.assert_allclose(dist["losses"], reference["losses"][4:], rtol=LOSS_RTOL)
    assert_weights_close(dist["weights"], reference["weights"])
