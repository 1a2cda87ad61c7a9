"""The strategy interface: how a model is placed, wrapped, reduced over and saved."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.checkpointer import SHARDED_DIR
from toolbox.core.context import RunContext

if TYPE_CHECKING:
    from toolbox.core.checkpointer import Checkpointer


class Strategy:
    """Single-process behaviour; DDP and FSDP override what differs."""

    #: parameters are sharded over ranks (FSDP): gathering the whole model is a collective
    shards_model: bool = False

    def __init__(self, context: RunContext) -> None:
        self.context = context

    @property
    def device(self) -> torch.device:
        return torch.device(self.context.device)

    def setup(self) -> None:
        """Start the process group (distributed strategies)."""

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return getattr(model, "module", model)

    def all_reduce_sum(self, value: float) -> float:
        return value

    def barrier(self) -> None:
        pass

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        return self.unwrap(model).state_dict()

    def load_model_state_dict(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        self.unwrap(model).load_state_dict(state)

    def optimizer_state_dict(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(state)

    def teardown(self) -> None:
        pass

    # checkpoints: the strategy decides how a trainer's state is written and read -----------------
    def save_checkpoint(self, checkpointer: Checkpointer, step: int, state: dict[str, Any]) -> Path | None:
        """Rank 0 writes the full state (every rank's RNG added under ``rng_ranks``); all ranks wait.

        Called on every rank with the trainer's ``state_dict()``; returns the folder on rank 0.
        """
        ranks = self.all_gather_object(state["rng"])
        if len(ranks) > 1:
            state = {**state, "rng_ranks": ranks}
        path = checkpointer.save(step, state) if self.context.is_main else None
        self.barrier()
        return path

    def load_training_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load model and optimizer from a checkpoint written under any strategy and world size."""
        if SHARDED_DIR in state:  # written under FSDP: torch.distributed.checkpoint reshards it
            from toolbox.distributed.sharded import load_sharded

            load_sharded(model, optimizer, state[SHARDED_DIR])
            return
        self.load_model_state_dict(model, state["model"])
        self.load_optimizer_state_dict(model, optimizer, state["optimizer"])

    def rank_rng_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """This rank's RNG state when the checkpoint has one per rank of this world size, else rank 0's."""
        ranks = state.get("rng_ranks")
        if ranks and len(ranks) == self.context.world_size:
            return ranks[self.context.rank]
        return state["rng"]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (``[obj]`` in one process)."""
        return [obj]

    def full_model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The whole model's state on rank 0, on CPU; a collective under FSDP (call it on every rank)."""
        return self.unwrap(model).state_dict()
