"""Sharded checkpoints with torch.distributed.checkpoint (DCP), readable under any world size.

The model and optimizer state are keyed by parameter name (``get_model_state_dict`` /
``get_optimizer_state_dict``), so DCP reshards on load: an FSDP run saved on 2 ranks resumes on 1
rank (FSDP, DDP or a plain single process: with no process group DCP reads every shard itself) or
on 4.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch


def named_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Model and optimizer state keyed by parameter name: local shards (DTensors) under FSDP."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}


def save_sharded(state: dict[str, Any], path: str | Path) -> None:
    """Every rank writes its shards of ``state`` into ``path`` (a collective under a process group)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, checkpoint_id=str(path))


def load_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str | Path) -> None:
    """Fill ``model`` and ``optimizer`` from a DCP folder, resharding to this run's layout."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    state = named_state(model, optimizer)
    with warnings.catch_warnings():  # without a process group DCP reads every shard itself: intended
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
