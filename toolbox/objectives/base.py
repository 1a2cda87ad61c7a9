"""The objective families. A trainer accepts objectives of one family and checks it up front."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LossOutput:
    """A loss summed over ``num_items`` items (tokens, samples), plus detached diagnostics.

    Returning a sum and a count (not a mean) lets a trainer normalise over all micro-batches of a
    gradient-accumulation step, so accumulation gives the same gradient as one large batch.
    """

    loss_sum: Any  # a scalar tensor with grad
    num_items: int
    metrics: dict[str, float] = field(default_factory=dict)


class Objective(ABC):
    family: str = "objective"


class SupervisedObjective(Objective):
    """``objective(model, batch) -> LossOutput`` on labelled batches.

    ``LossOutput.metrics["correct"]`` counts correct predictions; trainers and evaluators report
    ``correct / num_items`` under ``accuracy_name``.
    """

    family = "supervised"
    accuracy_name = "accuracy"

    @abstractmethod
    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput: ...


class PreferenceObjective(Objective):
    """Scores chosen vs rejected log-probabilities (under policy and reference)."""

    family = "preference"


class PolicyObjective(Objective):
    """A policy-gradient loss over rollouts (PPO, GRPO)."""

    family = "policy"


class GraphObjective(Objective):
    """A loss over graph batches."""

    family = "graph"


class ActorCriticObjective(Objective):
    """``objective(model, batch) -> LossOutput`` on a minibatch of environment transitions
    (observations, actions, old log-probs and values, advantages, returns) for an actor-critic."""

    family = "actor_critic"

    @abstractmethod
    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput: ...
