"""Strategies in one process: configs, block discovery, checkpoints that cross strategies.

A distributed strategy started in a plain process forms a group of one (gloo on a free loopback
port), so the checkpoint formats of single, DDP and FSDP can be crossed here cheaply; the
2-process runs are in test_two_processes.py.
"""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

STEPS = ["trainer.max_steps=8", "trainer.save_every=4", "trainer.eval_every=0", "scheduler=cosine"]
WEIGHT_ATOL = 1e-5


def _fit(overrides: list[str]) -> tuple[dict, list]:
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    started = []
    parts.trainer.bus.subscribe(Event.FIT_START, lambda d: started.append(d.payload["resumed_from"]))
    try:
        parts.trainer.fit()
        weights = {
            k: v.detach().clone() for k, v in parts.strategy.full_model_state_dict(parts.model).items()
        }
    finally:
        parts.strategy.teardown()
    return weights, started


def _close(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_registries_and_configs_compose():
    from toolbox.core.registries import LAUNCHERS, STRATEGIES

    assert {"single", "ddp", "fsdp"} <= set(STRATEGIES.names())
    assert {"local", "torchrun", "slurm"} <= set(LAUNCHERS.names())
    cfg = load_config(["strategy=fsdp", "precision=bf16", "launcher=torchrun", "launcher.nproc=4"])
    assert cfg.strategy.mixed_precision == "bf16"  # follows precision
    assert cfg.launcher.nproc == 4
    assert load_config(["strategy=ddp"]).strategy.backend == "auto"


def test_nccl_on_cpu_is_a_config_error(tmp_path):
    from toolbox.core.context import RunContext
    from toolbox.distributed.ddp import DDP

    with pytest.raises(ConfigError, match="nccl needs a CUDA device"):
        DDP(RunContext(tmp_path, device="cpu"), backend="nccl")


def test_transformer_blocks_are_found():
    from toolbox.core.registries import MODELS
    from toolbox.distributed.fsdp import transformer_blocks

    llama = MODELS.build({"name": "tiny_llama", "num_layers": 3}, vocab_size=32)
    assert [type(b).__name__ for b in transformer_blocks(llama)] == ["LlamaDecoderLayer"] * 3
    lm = MODELS.build(
        {"name": "transformer_lm", "num_layers": 2, "hidden_size": 64, "num_heads": 2}, vocab_size=32
    )
    blocks = transformer_blocks(lm)
    assert len(blocks) == 2 and all(isinstance(b, type(blocks[0])) for b in blocks)
    assert transformer_blocks(llama, ["LlamaMLP"])[0].__class__.__name__ == "LlamaMLP"


def test_checkpoints_cross_single_and_fsdp(tiny_overrides, tmp_path):
    """single -> fsdp and fsdp -> single resumes land on the uninterrupted single run's weights."""
    base = [*tiny_overrides, *STEPS]
    reference, _ = _fit([*base, f"run_dir={tmp_path / 'single'}"])

    # a full (unsharded) single checkpoint into FSDP: index-keyed optimizer state mapped to names
    fsdp_from_single, started = _fit(
        [*base, "strategy=fsdp", f"run_dir={tmp_path / 'a'}", f"resume_from={tmp_path / 'single/checkpoints/step_00000004'}"]
    )  # fmt: skip
    assert started == [4]
    assert _close(fsdp_from_single, reference) < WEIGHT_ATOL

    # a sharded FSDP checkpoint (DCP) into a plain single process, with no process group
    fsdp_full, _ = _fit([*base, "strategy=fsdp", f"run_dir={tmp_path / 'fsdp'}"])
    step4 = tmp_path / "fsdp" / "checkpoints" / "step_00000004"
    assert (step4 / "sharded" / ".metadata").is_file()
    assert _close(fsdp_full, reference) < WEIGHT_ATOL
    single_from_fsdp, started = _fit([*base, f"run_dir={tmp_path / 'b'}", f"resume_from={step4}"])
    assert started == [4]
    assert _close(single_from_fsdp, reference) < WEIGHT_ATOL


def test_ddp_resume_is_bitwise_and_files_match_single(tiny_overrides, tmp_path):
    base = [*tiny_overrides, *STEPS, "strategy=ddp", "model.dropout=0.1"]
    reference, _ = _fit([*base, f"run_dir={tmp_path / 'ref'}"])
    run = [*base, f"run_dir={tmp_path / 'run'}"]
    parts = ExperimentBuilder.from_config(load_config(run)).build()
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 4 and d.trainer.request_stop("test"))
    try:
        parts.trainer.fit()
    finally:
        parts.strategy.teardown()
    state = torch.load(tmp_path / "run/checkpoints/step_00000004/state.pt", weights_only=False)
    assert not any(k.startswith("module.") for k in state["model"])  # the unwrapped model: single's format
    resumed, started = _fit([*run, "resume_from=auto"])
    assert started == [4]
    assert _close(resumed, reference) == 0.0


def test_corrupt_shard_falls_back_to_previous_checkpoint(tiny_overrides, tmp_path):
    from toolbox.core.checkpointer import Checkpointer

    _fit([*tiny_overrides, *STEPS, "strategy=fsdp", f"run_dir={tmp_path / 'r'}"])
    shard = next((tmp_path / "r/checkpoints/step_00000008/sharded").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    path, state = Checkpointer(tmp_path / "r").load_latest()
    assert path.name == "step_00000004" and state["step"] == 4
