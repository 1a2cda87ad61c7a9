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
    """The base of every objective. What an objective needs from its trainer is declared here, once,
    with its default; an objective class (or its instance, from its settings) overrides what differs.
    A trainer computes exactly what is declared and probes nothing else.
    """

    family: str = "objective"
    #: the frozen reference's log-probs (DPO and kin; a policy loss with beta > 0)
    needs_reference: bool = False
    #: the per-token entropy, with grad (a policy loss with an entropy bonus)
    needs_entropy: bool = False
    #: log-probs of mismatched (prompt, completion) pairs: KTO's KL reference point
    needs_kl_pairs: bool = False
    #: a value estimate per state (actor-critic losses)
    needs_value_head: bool = False


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
    """Scores chosen vs rejected log-probabilities (under policy and reference).

    ``inputs`` says what it scores: ``"logps"`` (a causal LM's completion log-probs) or ``"scores"``
    (a sequence classifier's scalar per sequence); ``unpaired`` whether it also trains on unpaired
    (prompt, completion, label) examples. ``check_examples`` looks at the training examples once
    before training (KTO warns about unbalanced labels); the default accepts any.
    """

    family = "preference"
    inputs: str = "logps"
    unpaired: bool = False

    def check_examples(self, examples: Any) -> None:
        """Called once with the training examples before the first step."""


class PolicyObjective(Objective):
    """A policy-gradient loss over rollouts (PPO, GRPO)."""

    family = "policy"


class GraphObjective(SupervisedObjective):
    """A loss over graph batches (``toolbox.objectives.graph``): a supervised objective whose items
    (nodes, node pairs or graphs) belong to splits, so one forward pass over a graph serves the
    training loss and the validation and test scores alike.

    ``predict(model, batch, splits)`` returns, per split, the scores and targets of that split's
    items; ``__call__`` is the training loss over the ``train`` items, so the supervised trainer
    trains these objectives as it trains any other.
    """

    family = "graph"

    @abstractmethod
    def predict(
        self, model: Any, batch: dict[str, Any], splits: tuple[str, ...]
    ) -> dict[str, tuple[Any, Any]]:
        """``{split: (scores, targets)}`` of the items of each split, from one forward pass."""

    @abstractmethod
    def loss_sum(self, scores: Any, targets: Any) -> Any:
        """The loss summed over the items."""

    @abstractmethod
    def num_correct(self, scores: Any, targets: Any) -> float:
        """How many items are predicted right."""

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        scores, targets = self.predict(model, batch, ("train",))["train"]
        loss = self.loss_sum(scores, targets)
        return LossOutput(loss, int(targets.shape[0]), {"correct": self.num_correct(scores, targets)})


class ActorCriticObjective(Objective):
    """``objective(model, batch) -> LossOutput`` on a minibatch of environment transitions
    (observations, actions, old log-probs and values, advantages, returns) for an actor-critic."""

    family = "actor_critic"

    @abstractmethod
    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput: ...
