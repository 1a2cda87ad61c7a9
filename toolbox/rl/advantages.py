"""Advantage estimators (``ADVANTAGES``).

Two call shapes:

- *group estimators* (``group_norm``, ``rloo``, ``reinforce_pp``) take one scalar reward per
  completion, ``[N]`` with the ``num_generations`` completions of each prompt consecutive, and
  return one advantage per completion::

      adv = ADVANTAGES.build({"name": "group_norm", "scale": "group"})(rewards, num_generations=4)

  A NaN reward (no reward function could score the completion) is left out of every mean and
  standard deviation and gets advantage 0.

- ``gae`` (generalised advantage estimation, for the env trainer) takes time-major per-step
  tensors ``[T, E]`` and returns ``(advantages, returns)``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from toolbox.core.errors import ConfigError
from toolbox.core.registries import ADVANTAGES


def nanstd(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Bessel-corrected standard deviation ignoring NaNs (TRL's ``nanstd``)."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    std = torch.sqrt(var * count / (count - 1))
    if not keepdim:
        std = std.squeeze(dim) if dim is not None else std.reshape(())
    return std


def _groups(rewards: Tensor, num_generations: int) -> Tensor:
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(
            f"{rewards.numel()} rewards cannot be split into groups of num_generations={num_generations}"
        )
    return rewards.float().view(-1, num_generations)


class GroupEstimator:
    """Base of the per-prompt-group estimators: ``estimator(rewards [N], num_generations) -> [N]``."""

    def __call__(self, rewards: Tensor, num_generations: int) -> Tensor:
        raise NotImplementedError


@ADVANTAGES.register("group_norm")
class GroupNorm(GroupEstimator):
    """GRPO's advantage: reward minus its group's mean, divided by a standard deviation + eps.

    ``scale=group`` divides by the group's std (GRPO), ``batch`` by the std of the whole batch
    (Dr. GRPO's recommendation against difficulty bias is ``none``), ``none`` does not divide.
    Stds are Bessel-corrected and eps is 1e-4, as in TRL: rewards [1, 0, 0, 1] in one group give
    ±0.86588 (±0.5 unscaled).

    Args:
        scale: group, batch or none.
        eps: added to the standard deviation before dividing.
    """

    def __init__(self, scale: Literal["group", "batch", "none"] = "group", eps: float = 1e-4) -> None:
        if scale not in ("group", "batch", "none"):
            raise ConfigError(f"advantage.scale: {scale!r}; choose group, batch or none.")
        self.scale = scale
        self.eps = eps

    def __call__(self, rewards: Tensor, num_generations: int) -> Tensor:
        grouped = _groups(rewards, num_generations)
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        adv = grouped - mean
        if self.scale == "group":
            std = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean)
            adv = adv / (std + self.eps)
        elif self.scale == "batch":
            flat = grouped.flatten()
            std = nanstd(flat) if flat.numel() > 1 else torch.zeros(())
            adv = adv / (std + self.eps)
        return torch.nan_to_num(adv.flatten(), nan=0.0)


@ADVANTAGES.register("rloo")
class RLOO(GroupEstimator):
    """REINFORCE leave-one-out (Ahmadian et al. 2024): the baseline of each completion is the mean
    reward of the *other* completions of its prompt: ``A_i = r_i − mean_{j≠i} r_j``.

    Args:
        normalize: divide the advantages by their batch standard deviation (+ eps) afterwards.
        eps: added to the standard deviation when normalising.
    """

    def __init__(self, normalize: bool = False, eps: float = 1e-4) -> None:
        self.normalize = normalize
        self.eps = eps

    def __call__(self, rewards: Tensor, num_generations: int) -> Tensor:
        if num_generations < 2:
            raise ConfigError("advantage 'rloo' needs num_generations >= 2 (the baseline leaves one out).")
        grouped = _groups(rewards, num_generations)
        valid = ~torch.isnan(grouped)
        filled = torch.nan_to_num(grouped, nan=0.0)
        total = filled.sum(1, keepdim=True)
        others = (valid.sum(1, keepdim=True) - valid.float()).clamp(min=1.0)
        adv = torch.where(valid, filled - (total - filled) / others, torch.zeros_like(filled)).flatten()
        if self.normalize and adv.numel() > 1:
            adv = adv / (adv.std() + self.eps)
        return adv


@ADVANTAGES.register("reinforce_pp")
class ReinforcePP(GroupEstimator):
    """REINFORCE++ (Hu 2025): advantages whitened over the whole batch (no critic, no group std).

    ``baseline=none``: ``A = (r − mean_batch) / std_batch``; ``baseline=group`` (REINFORCE++-baseline)
    subtracts each prompt's mean reward first, then whitens over the batch.

    Args:
        baseline: none or group.
        eps: added to the batch standard deviation.
    """

    def __init__(self, baseline: Literal["none", "group"] = "none", eps: float = 1e-4) -> None:
        if baseline not in ("none", "group"):
            raise ConfigError(f"advantage.baseline: {baseline!r}; choose none or group.")
        self.baseline = baseline
        self.eps = eps

    def __call__(self, rewards: Tensor, num_generations: int) -> Tensor:
        grouped = _groups(rewards, num_generations)
        if self.baseline == "group":
            grouped = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
        flat = grouped.flatten()
        centred = flat - torch.nanmean(flat)
        std = nanstd(flat) if flat.numel() > 1 else torch.zeros(())
        return torch.nan_to_num(centred / (std + self.eps), nan=0.0)


@ADVANTAGES.register("gae")
class GAE:
    """Generalised advantage estimation (Schulman et al. 2016), as in CleanRL's ``ppo.py``.

    ``estimator(rewards, values, dones, next_value, next_done)``: ``rewards``, ``values`` and
    ``dones`` are ``[T, E]`` (steps × envs; ``dones[t]`` marks that the observation at step t
    began a new episode), ``next_value``/``next_done`` ``[E]`` describe the state after the last
    step. Returns ``(advantages, returns)`` with returns = advantages + values.

    Termination and truncation are kept apart by two optional ``[T, E]`` tensors:
    ``truncated[t]`` marks that step t's transition ended its episode by a time limit (not by
    termination) and ``final_values[t]`` is the value of that episode's last observation. The
    one-step target of such a step is ``r_t + γ·V(final obs)`` instead of ``r_t``, and the λ-chain
    is still cut there (the next observation belongs to another episode). Without them a
    truncation counts as a termination, as in CleanRL (``next_done = terminations | truncations``).

    Args:
        gamma: discount factor.
        lam: the GAE λ (0: one-step TD, 1: Monte Carlo).
    """

    def __init__(self, gamma: float = 0.99, lam: float = 0.95) -> None:
        if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
            raise ConfigError(f"advantage 'gae': gamma={gamma}, lam={lam}; both must be in [0, 1].")
        self.gamma = gamma
        self.lam = lam

    def __call__(
        self,
        rewards: Tensor,
        values: Tensor,
        dones: Tensor,
        next_value: Tensor,
        next_done: Tensor,
        truncated: Tensor | None = None,
        final_values: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        if (truncated is None) != (final_values is None):
            raise ValueError("gae: pass truncated and final_values together (or neither)")
        if truncated is not None:  # bootstrap truncated episodes from their last observation
            rewards = rewards.float() + self.gamma * truncated.float() * final_values.float()
        steps = rewards.shape[0]
        advantages = torch.zeros_like(rewards, dtype=torch.float32)
        last = torch.zeros_like(next_value, dtype=torch.float32)
        for t in reversed(range(steps)):
            if t == steps - 1:
                nonterminal = 1.0 - next_done.float()
                following = next_value.float()
            else:
                nonterminal = 1.0 - dones[t + 1].float()
                following = values[t + 1].float()
            delta = rewards[t].float() + self.gamma * following * nonterminal - values[t].float()
            last = delta + self.gamma * self.lam * nonterminal * last
            advantages[t] = last
        return advantages, advantages + values.float()
