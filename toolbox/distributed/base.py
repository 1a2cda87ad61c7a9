"""The strategy interface: how a model is placed, wrapped, reduced over and saved."""

from __future__ import annotations

from typing import Any

import torch

from toolbox.core.context import RunContext


class Strategy:
    """Single-process behaviour; DDP and FSDP override what differs."""

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

    def optimizer_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(state)

    def teardown(self) -> None:
        pass
