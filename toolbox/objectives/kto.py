"""KTO (Ethayarajh et al. 2024): the prospect-theoretic loss on good/bad completions, paired or not.

On unpaired examples (``unpaired_preference`` data) it is TRL 1.16's ``KTOTrainer``: each example's
loss by its label (``kto_losses``), the KL reference point z₀ from mismatched rows
(``kto_reference_point``), and TRL's metrics (``unpaired_metrics``); ``merge_unpaired_metrics``
combines the metrics of several batches (micro-batches, held-out chunks) the way they are defined.
On pairs (``PreferenceLogps`` of ``preference.py``) each chosen completion is a desirable example
and each rejected one undesirable. ``tests/objectives/test_preference_parity.py`` runs TRL's own
code on the same tensors.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import LossOutput
from toolbox.objectives.preference import PairLoss, PreferenceLogps

log = logging.getLogger(__name__)


def kto_losses(
    logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    kl: Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """KTO on *unpaired* completions: per-completion losses and implicit rewards.

    ``desirable`` (bool ``[N]``) marks the good completions; ``kl`` is the (detached, ≥ 0) reference
    point z₀. Desirable: ``w_d·(1 − σ(β·(r − z₀)))``; undesirable: ``w_u·(1 − σ(β·(z₀ − r)))``, with
    r = logp − ref logp. The losses come desirable first, then undesirable (TRL's order).
    """
    logratios = logps - ref_logps
    good, bad = logratios[desirable], logratios[~desirable]
    chosen_losses = desirable_weight * (1 - torch.sigmoid(beta * (good - kl)))
    rejected_losses = undesirable_weight * (1 - torch.sigmoid(beta * (kl - bad)))
    return torch.cat([chosen_losses, rejected_losses]), beta * logratios.detach()


def kto_reference_point(kl_logps: Tensor, ref_kl_logps: Tensor) -> Tensor:
    """z₀ = max(0, mean(logp − ref logp)) over mismatched pairs, detached (KTO's KL estimate)."""
    return (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)


def unpaired_metrics(
    rewards: Tensor, logps: Tensor, desirable: Tensor, kl: Tensor, logratios: Tensor
) -> dict[str, float]:
    """KTO's diagnostics on unpaired examples, as TRL 1.16's KTOTrainer logs them.

    ``rewards/chosen`` and ``logps/chosen`` are means over the desirable examples (present only when
    the batch has one), ``rewards/rejected`` and ``logps/rejected`` over the undesirable ones,
    ``rewards/margins`` their difference (when both are there); ``count/chosen`` and
    ``count/rejected`` count them; ``rewards/label_accuracy`` is the fraction of examples on the side
    of the reference point their label asks for (log-ratio > z₀ when desirable, < z₀ when not).
    """
    desirable = desirable.bool()
    rewards, logps, logratios = rewards.detach().float(), logps.detach().float(), logratios.detach().float()
    n_good, n_bad = int(desirable.sum()), int((~desirable).sum())
    metrics = {"kl": float(kl), "count/chosen": float(n_good), "count/rejected": float(n_bad)}
    if n_good:
        metrics["rewards/chosen"] = rewards[desirable].mean().item()
        metrics["logps/chosen"] = logps[desirable].mean().item()
    if n_bad:
        metrics["rewards/rejected"] = rewards[~desirable].mean().item()
        metrics["logps/rejected"] = logps[~desirable].mean().item()
    if n_good and n_bad:
        metrics["rewards/margins"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
    right = torch.where(desirable, logratios > kl, logratios < kl)
    metrics["rewards/label_accuracy"] = right.float().mean().item()
    return metrics


# unpaired metrics that are means over the desirable (chosen) or the undesirable (rejected) examples
_WEIGHTS = {
    "rewards/chosen": "count/chosen",
    "logps/chosen": "count/chosen",
    "rewards/rejected": "count/rejected",
    "logps/rejected": "count/rejected",
}


def merge_unpaired_metrics(batches: list[dict[str, float]]) -> dict[str, float]:
    """One set of metrics from the metrics of several unpaired batches (micro-batches, eval chunks).

    Counts add up; a mean over the desirable or undesirable examples is weighted by their count (a
    batch without any contributes nothing); other means (``kl``, ``rewards/label_accuracy``) are
    weighted by the batch's examples; ``rewards/margins`` is recomputed from the merged means.
    """
    totals: dict[str, float] = {}
    weights: dict[str, float] = {}
    for metrics in batches:
        size = metrics.get("count/chosen", 0.0) + metrics.get("count/rejected", 0.0)
        for key, value in metrics.items():
            if key == "rewards/margins":
                continue
            if key.startswith("count/"):
                totals[key] = totals.get(key, 0.0) + value
                continue
            w = metrics[_WEIGHTS[key]] if key in _WEIGHTS else size
            totals[key] = totals.get(key, 0.0) + value * w
            weights[key] = weights.get(key, 0.0) + w
    merged = {
        k: (v / weights[k] if k in weights else v) for k, v in totals.items() if weights.get(k, 1.0) > 0
    }
    if "rewards/chosen" in merged and "rewards/rejected" in merged:
        merged["rewards/margins"] = merged["rewards/chosen"] - merged["rewards/rejected"]
    return merged


@OBJECTIVES.register("kto")
class KTOLoss(PairLoss):
    """KTO (Ethayarajh et al. 2024): prospect-theoretic loss on unpaired good/bad completions.

    Fed unpaired examples (``unpaired_preference`` data: ``logps``, ``ref_logps``, ``desirable``), it
    is TRL's KTO: each example's loss by its label, the KL reference point z₀ from the mismatched rows
    (prompt i with the completion of example i−1 in the batch, TRL's rotation), and TRL's metrics
    (:func:`unpaired_metrics`). Fed pairs, each chosen completion is a desirable example and each
    rejected one undesirable; z₀ then comes from mismatched pairs (prompt i with the chosen
    completion of pair i+1). The trainer scores the mismatched rows when ``needs_kl_pairs``;
    without them z₀ = 0.

    Args:
        beta: the KL strength β.
        desirable_weight: w_d, weight of the desirable examples' losses.
        undesirable_weight: w_u, weight of the undesirable ones (keep w_d·n_d / w_u·n_u in [1, 4/3]).
    """

    needs_kl_pairs = True
    unpaired = True

    def __init__(
        self, beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0
    ) -> None:
        super().__init__(beta)
        self.desirable_weight = desirable_weight
        self.undesirable_weight = undesirable_weight

    def check_examples(self, examples: Any) -> None:
        """TRL's advice when desirable and undesirable examples are unbalanced (KTO paper, eq. 8)."""
        if not examples or "label" not in examples[0]:
            return  # pairs: as many desirable (chosen) as undesirable (rejected) completions
        wd, wu = self.desirable_weight, self.undesirable_weight
        n_good = max(sum(bool(ex.get("label")) for ex in examples), 1)
        n_bad = max(len(examples) - n_good, 1)
        if n_good == n_bad:
            return
        d_low, d_high = round(n_bad * wu / n_good, 2), round(n_bad * wu / n_good * 1.33, 2)
        u_low, u_high = round(n_good * wd / n_bad / 1.33, 2), round(n_good * wd / n_bad, 2)
        if not (d_low <= wd <= d_high or u_low <= wu <= u_high):
            log.warning(
                "KTO: %d desirable and %d undesirable training examples, and the weights are outside the "
                "recommended range; set EITHER objective.desirable_weight in [%s, %s] OR "
                "objective.undesirable_weight in [%s, %s].",
                n_good,
                n_bad,
                d_low,
                d_high,
                u_low,
                u_high,
            )

    def __call__(self, x: PreferenceLogps) -> LossOutput:
        if x.desirable is None:
            return super().__call__(x)
        if x.logps is None or x.ref_logps is None:
            raise ValueError("KTOLoss on unpaired examples needs logps and ref_logps (one per example)")
        if x.kl_logps is not None and x.ref_kl_logps is not None:
            kl = kto_reference_point(x.kl_logps, x.ref_kl_logps)
        else:
            kl = torch.zeros((), device=x.logps.device)
        desirable = x.desirable.bool()
        losses, rewards = kto_losses(
            x.logps, x.ref_logps, desirable, kl, self.beta, self.desirable_weight, self.undesirable_weight
        )
        metrics = unpaired_metrics(rewards, x.logps, desirable, kl, x.logps - x.ref_logps)
        return LossOutput(losses.sum(), int(losses.numel()), metrics)

    def losses(self, x: PreferenceLogps) -> tuple[Tensor, Tensor, Tensor]:
        self._logratios(x)  # checks the reference is there
        if x.kl_logps is not None and x.ref_kl_logps is not None:
            kl = kto_reference_point(x.kl_logps, x.ref_kl_logps)
        else:
            kl = torch.zeros((), device=x.chosen_logps.device)
        n = x.chosen_logps.shape[0]
        logps = torch.cat([x.chosen_logps, x.rejected_logps])
        ref = torch.cat([x.ref_chosen_logps, x.ref_rejected_logps])
        desirable = torch.arange(2 * n, device=logps.device) < n
        losses, rewards = kto_losses(
            logps, ref, desirable, kl, self.beta, self.desirable_weight, self.undesirable_weight
        )
        return losses, rewards[:n], rewards[n:], {"kl": float(kl)}
