"""Preference objectives: DPO and kin score chosen vs rejected completions.

An objective is called on a :class:`PreferenceLogps` (one entry per pair, shape ``[B]``) and returns
a :class:`LossOutput` whose ``loss_sum / num_items`` is the batch loss, with metrics that are batch
means::

    out = DPOLoss(beta=0.1)(PreferenceLogps(chosen_logps, rejected_logps, chosen_lengths,
                                            rejected_lengths, ref_chosen_logps, ref_rejected_logps))
    out.metrics  # rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins, logps/...

``*_logps`` are log-probabilities *summed* over each completion's tokens (the prompt is never
scored); ``*_lengths`` are the completion token counts, which the length-normalised losses (IPO,
SimPO, ORPO) divide by. What an objective needs is declared on its class, and the preference
trainer computes only that:

- ``needs_reference``: the frozen reference's log-probs (false for SimPO, ORPO, Bradley–Terry);
- ``needs_kl_pairs``: log-probs of mismatched (prompt, completion) pairs, KTO's KL reference point;
- ``inputs``: ``"logps"`` (a causal LM) or ``"scores"`` (Bradley–Terry: a sequence classifier's
  scalar per sequence, given in ``chosen_scores``/``rejected_scores``);
- ``unpaired``: whether it also trains on unpaired examples (only KTO): then ``logps``,
  ``ref_logps`` and ``desirable`` hold one entry per example (``[N]``) instead of the pair fields.

The formulas follow TRL 1.16 (``DPOTrainer``, ``CPOTrainer``, ``ORPOTrainer``, ``KTOTrainer``,
``RewardTrainer``); ``tests/objectives/test_preference_parity.py`` runs TRL's own code on the same
tensors. KTO, on pairs and on unpaired examples, is in ``kto.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import LossOutput, PreferenceObjective


@dataclass
class PreferenceLogps:
    """What a preference objective scores; every tensor has one entry per pair (``[B]``)."""

    chosen_logps: Tensor | None = None  # policy, summed over the chosen completion's tokens
    rejected_logps: Tensor | None = None
    chosen_lengths: Tensor | None = None  # completion tokens of each chosen completion
    rejected_lengths: Tensor | None = None
    ref_chosen_logps: Tensor | None = None  # frozen reference, same sums (no grad)
    ref_rejected_logps: Tensor | None = None
    kl_logps: Tensor | None = None  # KTO: policy log-probs of mismatched (prompt, completion) pairs
    ref_kl_logps: Tensor | None = None
    chosen_scores: Tensor | None = None  # Bradley–Terry: scalar scores of a sequence classifier
    rejected_scores: Tensor | None = None
    margin: Tensor | None = None  # Bradley–Terry: optional per-pair margin
    # unpaired examples (KTO), one entry per example ``[N]`` instead of per pair
    logps: Tensor | None = None  # policy, summed over the example's completion tokens
    ref_logps: Tensor | None = None  # frozen reference, same sums (no grad)
    lengths: Tensor | None = None  # completion tokens of each example
    desirable: Tensor | None = None  # bool: the example's label (true: desirable)


def reward_metrics(chosen_rewards: Tensor, rejected_rewards: Tensor) -> dict[str, float]:
    """The implicit-reward diagnostics every preference objective reports (batch means)."""
    chosen_rewards, rejected_rewards = chosen_rewards.detach().float(), rejected_rewards.detach().float()
    return {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
    }


class PairLoss(PreferenceObjective):
    """Base of the paired losses: ``losses(x) -> (per-pair loss, chosen rewards, rejected rewards)``."""

    needs_reference = True

    def __init__(self, beta: float = 0.1) -> None:
        if beta <= 0:
            raise ConfigError(f"objective.beta: {beta}; set a positive number (0.1 is usual).")
        self.beta = beta

    def losses(self, x: PreferenceLogps) -> tuple:
        """(per-pair losses, chosen rewards, rejected rewards[, extra metrics])."""
        raise NotImplementedError

    def __call__(self, x: PreferenceLogps) -> LossOutput:
        losses, chosen_rewards, rejected_rewards, *extra = self.losses(x)
        metrics = reward_metrics(chosen_rewards, rejected_rewards)
        for more in extra:
            metrics.update(more)
        if x.chosen_logps is not None:
            metrics["logps/chosen"] = x.chosen_logps.detach().float().mean().item()
            metrics["logps/rejected"] = x.rejected_logps.detach().float().mean().item()
        return LossOutput(losses.sum(), int(losses.numel()), metrics)

    def _logratios(self, x: PreferenceLogps) -> tuple[Tensor, Tensor]:
        if x.ref_chosen_logps is None or x.ref_rejected_logps is None:
            raise ValueError(
                f"{type(self).__name__} needs the reference log-probs (ref_chosen_logps, ref_rejected_logps)"
            )
        return x.chosen_logps - x.ref_chosen_logps, x.rejected_logps - x.ref_rejected_logps


@OBJECTIVES.register("dpo")
class DPOLoss(PairLoss):
    """DPO's sigmoid loss ``-log σ(β·Δ)``, Δ = (chosen − ref chosen) − (rejected − ref rejected).

    With ``label_smoothing`` ε > 0 it is conservative DPO (cDPO): the label is flipped with
    probability ε, ``-(1-ε)·log σ(β·Δ) - ε·log σ(-β·Δ)``.

    Args:
        beta: the KL strength β (temperature of the implicit reward β·log π/π_ref).
        label_smoothing: ε, the assumed probability that a pair's label is wrong (0: plain DPO).
    """

    def __init__(self, beta: float = 0.1, label_smoothing: float = 0.0) -> None:
        super().__init__(beta)
        if not 0.0 <= label_smoothing < 0.5:
            raise ConfigError(f"objective.label_smoothing: {label_smoothing}; set a value in [0, 0.5).")
        self.label_smoothing = label_smoothing

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen, rejected = self._logratios(x)
        logits = self.beta * (chosen - rejected)
        eps = self.label_smoothing
        losses = -F.logsigmoid(logits) * (1 - eps) - F.logsigmoid(-logits) * eps
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach()


@OBJECTIVES.register("robust_dpo")
class RobustDPOLoss(DPOLoss):
    """Robust DPO (Chowdhury et al. 2024): an unbiased loss under label noise ε.

    ``((1-ε)·(-log σ(β·Δ)) + ε·log σ(-β·Δ)) / (1 - 2ε)``.

    Args:
        beta: the KL strength β.
        label_smoothing: ε, the label-flip rate the loss corrects for, in [0, 0.5).
    """

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen, rejected = self._logratios(x)
        logits = self.beta * (chosen - rejected)
        eps = self.label_smoothing
        losses = (-(1 - eps) * F.logsigmoid(logits) + eps * F.logsigmoid(-logits)) / (1 - 2 * eps)
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach()


@OBJECTIVES.register("ipo")
class IPOLoss(PairLoss):
    """IPO (Azar et al. 2023): ``(Δ̄ - 1/(2β))²`` on length-averaged log-ratios, as TRL computes it.

    Args:
        beta: the regularisation τ; the target margin of the averaged log-ratios is 1/(2β).
    """

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen, rejected = self._logratios(x)
        delta = chosen / x.chosen_lengths.clamp(min=1.0) - rejected / x.rejected_lengths.clamp(min=1.0)
        losses = (delta - 1 / (2 * self.beta)) ** 2
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach()


@OBJECTIVES.register("hinge")
class HingeLoss(PairLoss):
    """The SLiC hinge loss ``max(0, 1 - β·Δ)``.

    Args:
        beta: the inverse margin: pairs with β·Δ ≥ 1 contribute nothing.
    """

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen, rejected = self._logratios(x)
        losses = torch.relu(1 - self.beta * (chosen - rejected))
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach()


@OBJECTIVES.register("simpo")
class SimPOLoss(PairLoss):
    """SimPO (Meng et al. 2024): reference-free, length-normalised, with a target margin γ.

    ``-log σ(β·(mean logp chosen − mean logp rejected) − γ)``; the implicit reward is β·mean logp.

    Args:
        beta: scale of the length-averaged log-probs (SimPO uses 2.0–2.5).
        gamma: the target reward margin γ.
        label_smoothing: ε, the assumed label-flip rate (as in cDPO; 0 for SimPO proper).
    """

    needs_reference = False

    def __init__(self, beta: float = 2.0, gamma: float = 0.5, label_smoothing: float = 0.0) -> None:
        super().__init__(beta)
        self.gamma = gamma
        self.label_smoothing = label_smoothing

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen = x.chosen_logps / x.chosen_lengths.clamp(min=1.0)
        rejected = x.rejected_logps / x.rejected_lengths.clamp(min=1.0)
        logits = self.beta * (chosen - rejected - self.gamma / self.beta)
        eps = self.label_smoothing
        losses = -F.logsigmoid(logits) * (1 - eps) - F.logsigmoid(-logits) * eps
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach()


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, stable at both ends."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


@OBJECTIVES.register("orpo")
class ORPOLoss(PairLoss):
    """ORPO (Hong et al. 2024): NLL of the chosen completion − λ·log σ(log odds ratio); no reference.

    The odds use length-averaged log-probs p̄: ``odds(y) = p̄/(1-p̄)``; the NLL is the mean
    per-token negative log-likelihood of the chosen completions.

    Args:
        beta: λ, the weight of the odds-ratio term (0.1 in the paper and TRL).
    """

    needs_reference = False

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        chosen = (x.chosen_logps / x.chosen_lengths.clamp(min=1.0)).float()
        rejected = (x.rejected_logps / x.rejected_lengths.clamp(min=1.0)).float()
        log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))
        ratio = F.logsigmoid(log_odds)
        nll = -x.chosen_logps.sum() / x.chosen_lengths.sum().clamp(min=1.0)
        losses = nll - self.beta * ratio  # mean over pairs = nll − λ·mean ratio, as TRL
        extra = {
            "log_odds_ratio": ratio.detach().mean().item(),
            "log_odds_chosen": log_odds.detach().mean().item(),
            "nll_loss": nll.detach().item(),
        }
        return losses, self.beta * chosen.detach(), self.beta * rejected.detach(), extra


@OBJECTIVES.register("bradley_terry")
class BradleyTerryLoss(PreferenceObjective):
    """Reward-model training: ``-log σ(s_chosen − s_rejected − margin)`` on a classifier's scores.

    The model is a sequence classifier with one output (``model=reward_model``); its score of each
    full (prompt + completion) sequence is the reward. The learned reward (``rewards/learned.py``)
    serves the trained model.

    Args:
        center_rewards_coefficient: weight of ``mean((s_c + s_r)²)``, which keeps rewards centred on 0
            (Eisenstein et al. 2023); 0 disables it.
    """

    inputs = "scores"

    def __init__(self, center_rewards_coefficient: float = 0.0) -> None:
        self.center_rewards_coefficient = center_rewards_coefficient

    def __call__(self, x: PreferenceLogps) -> LossOutput:
        chosen, rejected = x.chosen_scores.float(), x.rejected_scores.float()
        diff = chosen - rejected
        if x.margin is not None:
            diff = diff - x.margin
        losses = -F.logsigmoid(diff)
        if self.center_rewards_coefficient:
            losses = losses + self.center_rewards_coefficient * (chosen + rejected) ** 2
        return LossOutput(losses.sum(), int(losses.numel()), reward_metrics(chosen, rejected))
