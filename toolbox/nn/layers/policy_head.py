"""Policy heads (role ``policy_head``): an actor network's output → an action distribution.

- ``policy_head/categorical``: the output is ``num_actions`` logits; the mode is the argmax.
- ``policy_head/diag_gaussian``: the output is the mean of a diagonal Gaussian whose log standard
  deviation is a learned, state-independent parameter (CleanRL's ``actor_logstd``); the mode is
  the mean, clamped to the action bounds when the owner knows them.

A head's ``forward(output)`` returns a ``torch.distributions`` object whose ``log_prob`` and
``entropy`` are one number per sample (summed over action dimensions); ``mode(output)`` is the
deterministic action.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from toolbox.core.registries import LAYERS


@LAYERS.register("policy_head/categorical")
class CategoricalHead(nn.Module):
    """A categorical distribution over ``num_actions`` discrete actions from logits.

    Args:
        num_actions: number of actions; injected by the owning model.
    """

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.num_actions = num_actions
        self.out_dim = num_actions

    def forward(self, logits: Tensor) -> Distribution:
        return Categorical(logits=logits, validate_args=False)

    def mode(self, logits: Tensor) -> Tensor:
        return logits.argmax(-1)


@LAYERS.register("policy_head/diag_gaussian")
class DiagGaussianHead(nn.Module):
    """A diagonal Gaussian with a learned state-independent log standard deviation.

    Args:
        action_dim: number of action dimensions; injected by the owning model.
        action_low: lower action bounds (injected); the deterministic action is clamped to them.
        action_high: upper action bounds (injected).
        log_std_init: initial log standard deviation of every dimension (CleanRL: 0).
    """

    def __init__(
        self,
        action_dim: int,
        action_low: list[float] | None = None,
        action_high: list[float] | None = None,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.out_dim = action_dim
        self.log_std = nn.Parameter(torch.full((1, action_dim), float(log_std_init)))
        low = torch.tensor(action_low if action_low is not None else [-float("inf")] * action_dim)
        high = torch.tensor(action_high if action_high is not None else [float("inf")] * action_dim)
        self.register_buffer("action_low", low.float(), persistent=False)
        self.register_buffer("action_high", high.float(), persistent=False)

    def forward(self, mean: Tensor) -> Distribution:
        std = self.log_std.expand_as(mean).exp()
        return Independent(Normal(mean, std, validate_args=False), 1, validate_args=False)

    def mode(self, mean: Tensor) -> Tensor:
        return torch.maximum(torch.minimum(mean, self.action_high), self.action_low)
