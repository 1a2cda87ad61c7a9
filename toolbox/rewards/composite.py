"""A weighted sum of named reward components, with per-component metrics and the error policy.

::

    reward:
      name: composite
      on_error: skip
      components:
        correct: {name: numeric_match, weight: 1.0}
        format:  {name: format_regex, pattern: '-?\\d+', weight: 0.2}

A component returning ``None`` for a sample is left out of that sample's sum (TRL's ``nansum``);
a sample every component skips is unscorable: its total is ``None`` (the GRPO trainer gives it
advantage 0). A component that raises is logged with its name and handled by ``on_error``
(see ``toolbox.rewards.base``); the run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.base import OnError, Reward, RewardFn, call_reward, reward_name


@dataclass
class RewardResult:
    """Scores of one batch: ``total`` [N] (NaN: unscorable), ``per_component`` [N, K] (NaN: skipped)."""

    total: torch.Tensor
    per_component: torch.Tensor
    names: list[str]
    metrics: dict[str, float] = field(default_factory=dict)

    def totals(self) -> list[float | None]:
        return [None if math.isnan(v) else v for v in self.total.tolist()]


@REWARDS.register("composite")
class CompositeReward(Reward):
    """The weighted sum of several rewards.

    Args:
        components: label -> reward spec (a ``name:`` of REWARDS plus its settings and an optional
            ``weight``, default 1.0); or, in code, label -> a callable reward.
        weights: label -> weight, overriding the specs' ``weight`` (handy from the command line).
        on_error: what a component that raises gives the batch: skip (None), zero (0.0) or raise.
    """

    def __init__(
        self,
        components: Mapping[str, Any],
        weights: dict[str, float] | None = None,
        on_error: OnError = "skip",
    ) -> None:
        if not components:
            raise ConfigError("reward.components: empty; add at least one component (label: {name: ...}).")
        if on_error not in ("skip", "zero", "raise"):
            raise ConfigError(f"reward.on_error: {on_error!r}; choose skip, zero or raise.")
        self.names: list[str] = []
        self.fns: list[RewardFn] = []
        self.weights: list[float] = []
        for label, spec in components.items():
            if isinstance(spec, Mapping):
                spec = dict(spec)
                weight = float(spec.pop("weight", 1.0))
                fn = REWARDS.build(spec, f"reward.components.{label}")
            elif callable(spec):
                weight, fn = 1.0, spec
            else:
                raise ConfigError(
                    f"reward.components.{label}: expected a reward spec with a 'name', got {spec!r}."
                )
            self.names.append(str(label))
            self.fns.append(fn)
            self.weights.append(weight)
        for label, w in (weights or {}).items():
            if label not in self.names:
                raise ConfigError(
                    f"reward.weights.{label}: no such component; components: {', '.join(self.names)}."
                )
            self.weights[self.names.index(label)] = float(w)
        self.on_error: OnError = on_error
        self.errors = {n: 0 for n in self.names}

    @classmethod
    def of(
        cls, rewards: Sequence[RewardFn], weights: Sequence[float] | None = None, on_error: OnError = "skip"
    ) -> CompositeReward:
        """From callables (TRL-style reward functions); labels are their names."""
        components: dict[str, RewardFn] = {}
        for i, fn in enumerate(rewards):
            label = reward_name(fn)
            components[label if label not in components else f"{label}_{i}"] = fn
        out = cls(components, on_error=on_error)
        if weights is not None:
            out.weights = [float(w) for w in weights]
        return out

    def score(self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any) -> RewardResult:
        n, k = len(completions), len(self.fns)
        table = torch.full((n, k), float("nan"))
        metrics: dict[str, float] = {}
        for j, (name, fn) in enumerate(zip(self.names, self.fns, strict=True)):
            scores, failed = call_reward(fn, prompts, completions, fields, self.on_error, name)
            if failed:
                self.errors[name] += 1
            metrics[f"rewards/{name}/errors"] = float(self.errors[name])
            # one column write (as float32, like an element's), not one tensor write per completion
            table[:, j] = torch.tensor([float("nan") if s is None else s for s in scores], dtype=table.dtype)
            col = table[:, j]
            valid = col[~torch.isnan(col)]
            metrics[f"rewards/{name}/mean"] = valid.mean().item() if valid.numel() else float("nan")
            metrics[f"rewards/{name}/std"] = valid.std().item() if valid.numel() > 1 else 0.0
            metrics[f"rewards/{name}/skipped"] = float(n - valid.numel())
            extra = getattr(fn, "metrics", None)
            if callable(extra):
                for key, value in extra().items():
                    metrics[f"rewards/{name}/{key}"] = value
        w = torch.tensor(self.weights)
        total = (table * w).nansum(dim=1)
        total[torch.isnan(table).all(dim=1)] = float("nan")
        valid = total[~torch.isnan(total)]
        metrics["reward"] = valid.mean().item() if valid.numel() else float("nan")
        metrics["reward_std"] = valid.std().item() if valid.numel() > 1 else 0.0
        metrics["rewards/unscorable"] = float(n - valid.numel())
        return RewardResult(total, table, list(self.names), metrics)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        return self.score(prompts, completions, **fields).totals()
