"""Shared fixtures: configs composed through Hydra's compose API, tiny and fast."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# pytest -n 2 runs two workers on two cores: one torch thread each (subprocesses inherit it), or
# spinning OpenMP threads of one worker steal the other's core and everything runs many times slower
os.environ.setdefault("OMP_NUM_THREADS", "1")

# a model and data set small enough that a training test takes seconds on 2 cores
TINY = [
    "model.hidden_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=128",
    "data.source.num_train=256",
    "data.source.num_test=32",
    "trainer.batch_size=16",
    "callbacks=none",
    "eval=lm",
    "device=cpu",
]


@pytest.fixture
def tiny():
    return list(TINY)


@pytest.fixture
def tiny_overrides(tmp_path):
    return [*TINY, f"run_dir={tmp_path / 'run'}"]


@pytest.fixture
def compose():
    from toolbox.experiment import load_config

    return load_config
