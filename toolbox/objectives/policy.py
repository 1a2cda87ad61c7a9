"""Policy-gradient objectives (PPO, GRPO, DAPO, Dr. GRPO, GSPO, CISPO, SAPO, LUSPO, VESPO) over completions.

The GRPO trainer calls an objective on a :class:`PolicyBatch` of per-token tensors, all ``[B, T]``
over the *completion* tokens (the prompt is not part of them)::

    batch = PolicyBatch(
        logprobs=new_logps,            # log π_θ(token), with grad            [B, T]
        completion_mask=mask,          # 1 on scored completion tokens         [B, T]
        advantages=adv,                # one per sequence [B] or per token   [B, T]
        old_logprobs=old_logps,        # the sampling policy's (None: ratio 1) [B, T]
        ref_logprobs=ref_logps,        # frozen reference (when beta > 0)      [B, T]
        entropy=entropy,               # per-token entropy (when entropy_coef) [B, T]
        max_completion_length=16,      # the sampler's token limit (dr_grpo's L, unless set)
        is_weights=w,                  # truncated importance weights π_old/π_sampler (or None) [B, T]
    )
    out = objective(batch)             # LossOutput: loss_sum / num_items is the loss
    (out.loss_sum / out.num_items).backward()

Per token, with ratio ρ = exp(log π_θ − log π_old) (token level) or the geometric mean of the
sequence's ratios (``importance_sampling_level="sequence"``, GSPO)::

    loss_t = −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A) + β·KL_t

then aggregated by ``loss_type`` (``aggregate``), minus ``entropy_coef`` × the mean token entropy.
``loss_sum``/``num_items`` are returned as a sum and a count so that a trainer splitting a batch
into micro-batches can add the sums and divide by the total count (exact for ``grpo``, ``dapo``
and ``dr_grpo``; ``bnpo`` normalises each micro-batch by its own tokens, as in TRL). The formulas
follow TRL 1.16's ``GRPOTrainer._compute_loss``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import LossOutput, PolicyObjective
from toolbox.objectives.kl import KLEstimator, kl_estimate

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")


@dataclass
class PolicyBatch:
    """Per-token inputs of a policy objective; see the module docstring for the shapes."""

    logprobs: Tensor
    completion_mask: Tensor
    advantages: Tensor
    old_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    entropy: Tensor | None = None
    max_completion_length: int | None = None  # the rollout's limit: dr_grpo's L when the objective sets none
    is_weights: Tensor | None = (
        None  # per-token loss weights π_old/π_sampler, truncated (toolbox.rl.importance)
    )


def aggregate(
    per_token_loss: Tensor, mask: Tensor, loss_type: LossType, max_completion_length: int | None = None
) -> tuple[Tensor, int]:
    """(sum, count) of a per-token loss; ``sum / count`` is the loss of ``loss_type``:

    - ``grpo``: mean over each sequence's tokens, then mean over sequences (count = B);
    - ``dapo``: mean over all tokens of the batch (count = tokens);
    - ``bnpo``: the same within one batch (count = tokens; TRL normalises per micro-batch);
    - ``dr_grpo``: sum over tokens / (B × max_completion_length), no length bias (count = B·L);
    - ``sapo`` as ``grpo``; ``cispo`` and ``vespo`` as ``dapo``;
    - ``luspo``: sum over each sequence's tokens, then mean over sequences (count = B).
    """
    mask = mask.to(per_token_loss.dtype)
    masked = per_token_loss * mask
    if loss_type in ("grpo", "sapo"):
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum(), int(per_token_loss.shape[0])
    if loss_type in ("dapo", "bnpo", "cispo", "vespo"):
        return masked.sum(), max(int(mask.sum().item()), 1)
    if loss_type == "dr_grpo":
        length = max_completion_length or per_token_loss.shape[1]
        return masked.sum(), int(per_token_loss.shape[0] * length)
    if loss_type == "luspo":
        return masked.sum(), int(per_token_loss.shape[0])
    raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {', '.join(LOSS_TYPES)}")


def high_entropy_mask(entropy: Tensor, mask: Tensor, top_quantile: float) -> Tensor:
    """Scored tokens whose entropy is in the top ``top_quantile`` of the batch's (TRL's
    ``get_high_entropy_mask`` with threshold ``1 − top_quantile``)."""
    scored = entropy[mask.bool()].float()
    if scored.numel() == 0:
        return torch.zeros_like(entropy, dtype=torch.bool)
    threshold = torch.quantile(scored, 1 - top_quantile)
    return ((entropy * mask.to(entropy.dtype)) >= threshold) & mask.bool()


@torch.no_grad()
def vespo_weights(
    advantages: Tensor,
    log_ratio: Tensor,
    mask: Tensor,
    k_pos: float,
    lambda_pos: float,
    k_neg: float,
    lambda_neg: float,
) -> Tensor:
    """VESPO's gamma weight ``φ(w) = e^λ·w^k·e^(−λw)`` of each sequence's ratio ``w`` (``[B, 1]``, no grad)."""
    lower = math.log(1e-8)
    seq_log_ratio = torch.sum(torch.clamp(log_ratio, -20.0, 20.0) * mask, dim=-1, keepdim=True)
    log_w = torch.clamp(seq_log_ratio, lower, 20.0)
    nonneg = advantages >= 0
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@OBJECTIVES.register("clipped_policy")
class ClippedPolicyLoss(PolicyObjective):
    """The clipped policy-gradient loss of GRPO and its variants, with KL and entropy terms.

    Args:
        loss_type: the per-token loss and how it becomes one number: grpo (per-sequence mean, then
            batch mean), dr_grpo (sum / (batch × max_completion_length)), dapo (mean over all
            tokens), bnpo (mean over the batch's tokens) — all on the clipped surrogate; cispo (the
            ratio clipped at epsilon_high and detached, times A·log π; token mean), sapo (a
            sigmoid-smoothed ratio with temperatures per advantage sign; as grpo), luspo (the
            clipped surrogate summed per sequence, mean over sequences; use sequence-level ratios)
            and vespo (a gamma weight of the sequence ratio, detached, times A·log π; token mean).
        epsilon_low: lower clip range: ratios below 1 − epsilon_low stop the gradient (for A < 0).
        epsilon_high: upper clip range (DAPO's clip-higher); null uses epsilon_low.
        importance_sampling_level: token (one ratio per token, GRPO/PPO) or sequence (the
            length-normalised sequence ratio for every token, GSPO).
        beta: weight of the per-token KL to the frozen reference (0: no reference model needed).
        kl_estimator: k1, k2 or k3 (see objectives/kl.py).
        entropy_coef: weight of the entropy bonus (the loss subtracts coef × mean token entropy).
        max_completion_length: L of dr_grpo's normaliser; null uses the batch's
            ``max_completion_length`` (the trainer's sampling limit), else its completion width.
        delta: optional upper bound on the unclipped ratio (two-sided clipping, INTELLECT-2).
        top_entropy_quantile: train only on the tokens whose entropy is in this top fraction of
            the batch's (1.0: all tokens; 0.2 in "Beyond the 80/20 rule"); the entropy bonus acts on
            the same tokens.
        sapo_temperature_pos: sapo's temperature for tokens with a positive advantage.
        sapo_temperature_neg: sapo's temperature for the others.
        vespo_k_pos: vespo's power k for a non-negative advantage.
        vespo_lambda_pos: vespo's decay λ for a non-negative advantage.
        vespo_k_neg: vespo's power k for a negative advantage.
        vespo_lambda_neg: vespo's decay λ for a negative advantage.
    """

    def __init__(
        self,
        loss_type: LossType = "grpo",
        epsilon_low: float = 0.2,
        epsilon_high: float | None = None,
        importance_sampling_level: Literal["token", "sequence"] = "token",
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        entropy_coef: float = 0.0,
        max_completion_length: int | None = None,
        delta: float | None = None,
        top_entropy_quantile: float = 1.0,
        sapo_temperature_pos: float = 1.0,
        sapo_temperature_neg: float = 1.05,
        vespo_k_pos: float = 2.0,
        vespo_lambda_pos: float = 3.0,
        vespo_k_neg: float = 3.0,
        vespo_lambda_neg: float = 2.0,
    ) -> None:
        if loss_type not in LOSS_TYPES:
            raise ConfigError(f"objective.loss_type: {loss_type!r}; choose one of {', '.join(LOSS_TYPES)}.")
        if not 0.0 < top_entropy_quantile <= 1.0:
            raise ConfigError(
                f"objective.top_entropy_quantile: {top_entropy_quantile}; set a fraction in (0, 1] (1.0: all tokens)."
            )
        if sapo_temperature_pos <= 0 or sapo_temperature_neg <= 0:
            raise ConfigError("objective.sapo_temperature_pos / sapo_temperature_neg must be positive.")
        if epsilon_low < 0 or (epsilon_high is not None and epsilon_high < 0):
            raise ConfigError("objective.epsilon_low / epsilon_high must be >= 0.")
        if beta < 0:
            raise ConfigError(f"objective.beta: {beta}; set 0 (no KL term) or a positive weight.")
        if delta is not None and delta <= 1:
            raise ConfigError(f"objective.delta: {delta}; a bound on the ratio must exceed 1 (or be null).")
        self.loss_type = loss_type
        self.epsilon_low = epsilon_low
        self.epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
        self.importance_sampling_level = importance_sampling_level
        self.beta = beta
        self.kl_estimator = kl_estimator
        self.entropy_coef = entropy_coef
        self.max_completion_length = max_completion_length
        self.delta = delta
        self.top_entropy_quantile = top_entropy_quantile
        self.sapo_temperatures = (sapo_temperature_pos, sapo_temperature_neg)
        self.vespo = (vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)

    @property
    def needs_reference(self) -> bool:
        """Whether the trainer must compute ``ref_logprobs`` (only when beta > 0)."""
        return self.beta > 0

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef != 0 or self.top_entropy_quantile < 1.0

    def __call__(self, batch: PolicyBatch) -> LossOutput:
        logps, mask = batch.logprobs, batch.completion_mask.to(batch.logprobs.dtype)
        old = batch.old_logprobs if batch.old_logprobs is not None else logps.detach()
        adv = batch.advantages.to(logps.dtype)
        if adv.dim() == 1:
            adv = adv.unsqueeze(1)
        log_ratio = logps - old
        if self.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        elif self.importance_sampling_level != "token":
            raise ConfigError(
                f"objective.importance_sampling_level: {self.importance_sampling_level!r}; choose token or sequence."
            )
        ratio = torch.exp(log_ratio)
        per_token = self._per_token_loss(ratio, logps, logps - old, adv, mask)
        if batch.is_weights is not None:  # off-policy correction of the sampler (before the KL, as TRL)
            per_token = per_token * batch.is_weights.to(per_token.dtype)
        metrics: dict[str, float] = {}
        if self.top_entropy_quantile < 1.0:
            if batch.entropy is None:
                raise ValueError("objective top_entropy_quantile < 1 needs entropy in the PolicyBatch")
            entropy_mask = high_entropy_mask(batch.entropy.detach(), mask, self.top_entropy_quantile)
            per_token = per_token * entropy_mask
            metrics["entropy_mask/fraction"] = masked_mean(entropy_mask.to(mask.dtype), mask).item()
        if self.beta:
            if batch.ref_logprobs is None:
                raise ValueError("objective beta > 0 needs ref_logprobs in the PolicyBatch")
            kl = kl_estimate(logps, batch.ref_logprobs, self.kl_estimator)
            per_token = per_token + self.beta * kl
            metrics["kl"] = masked_mean(kl.detach(), mask).item()
        elif batch.ref_logprobs is not None:  # report the KL even when it does not enter the loss
            metrics["kl"] = masked_mean(
                kl_estimate(logps.detach(), batch.ref_logprobs, self.kl_estimator), mask
            ).item()
        per_token = per_token.expand_as(mask) if per_token.shape != mask.shape else per_token
        length = self.max_completion_length
        loss_sum, count = aggregate(
            per_token, mask, self.loss_type, batch.max_completion_length if length is None else length
        )
        metrics["policy_loss"] = (loss_sum.detach() / count).item()
        if batch.entropy is not None:
            entropy = masked_mean(batch.entropy, mask)
            metrics["entropy"] = entropy.detach().item()
            if self.entropy_coef:
                bonus = entropy
                if self.top_entropy_quantile < 1.0:  # the bonus acts on the tokens the loss trains
                    bonus = masked_mean(batch.entropy, mask * entropy_mask)
                loss_sum = loss_sum - self.entropy_coef * bonus * count
        elif self.entropy_coef:
            raise ValueError("objective entropy_coef != 0 needs entropy in the PolicyBatch")
        with torch.no_grad():
            r = ratio.expand_as(mask) if ratio.shape != mask.shape else ratio
            low = ((r < 1 - self.epsilon_low) & (adv < 0)).to(mask.dtype)
            high = ((r > 1 + self.epsilon_high) & (adv > 0)).to(mask.dtype)
            lr = log_ratio.expand_as(mask) if log_ratio.shape != mask.shape else log_ratio
            metrics.update(
                {
                    "clip_ratio/low": masked_mean(low, mask).item(),
                    "clip_ratio/high": masked_mean(high, mask).item(),
                    "clip_ratio/region": masked_mean(torch.clamp(low + high, max=1.0), mask).item(),
                    "ratio": masked_mean(r, mask).item(),
                    "approx_kl": masked_mean(torch.expm1(lr) - lr, mask).item(),  # old → new, CleanRL's k3
                }
            )
        return LossOutput(loss_sum, count, metrics)

    def _per_token_loss(
        self, ratio: Tensor, logps: Tensor, token_log_ratio: Tensor, adv: Tensor, mask: Tensor
    ):
        """The loss of each token before aggregation (before the KL term), by ``loss_type``."""
        if self.loss_type == "cispo":
            return -torch.clamp(ratio, max=self.epsilon_high).detach() * adv * logps
        if self.loss_type == "sapo":
            pos, neg = self.sapo_temperatures
            temperature = torch.where(adv > 0, pos, neg)
            return -torch.sigmoid(temperature * (ratio - 1)) * 4 / temperature * adv
        if self.loss_type == "vespo":
            return -vespo_weights(adv, token_log_ratio, mask, *self.vespo) * adv * logps
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        unclipped = ratio if self.delta is None else torch.clamp(ratio, max=self.delta)
        return -torch.min(unclipped * adv, clipped * adv)


@OBJECTIVES.register("ppo")
class PPOLoss(ClippedPolicyLoss):
    """PPO's clipped surrogate (Schulman et al. 2017): token-level ratios, mean over all tokens.

    Args:
        epsilon: the clip range ε (ratios outside [1−ε, 1+ε] stop the gradient).
        beta: weight of the per-token KL to a frozen reference (0: none).
        kl_estimator: k1, k2 or k3.
        entropy_coef: weight of the entropy bonus.
        loss_type: aggregation of the per-token losses (dapo = token mean, PPO's usual choice).
    """

    def __init__(
        self,
        epsilon: float = 0.2,
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        entropy_coef: float = 0.0,
        loss_type: LossType = "dapo",
    ) -> None:
        super().__init__(
            loss_type=loss_type,
            epsilon_low=epsilon,
            beta=beta,
            kl_estimator=kl_estimator,
            entropy_coef=entropy_coef,
        )


@OBJECTIVES.register("gspo")
class GSPOLoss(ClippedPolicyLoss):
    """GSPO (Zheng et al. 2025): the sequence-level importance ratio, with GSPO's tight clip range.

    Args:
        epsilon_low: lower clip range of the sequence ratio (3e-4 in the paper).
        epsilon_high: upper clip range (4e-4 in the paper).
        beta: weight of the per-token KL to a frozen reference (0: none).
        kl_estimator: k1, k2 or k3.
        entropy_coef: weight of the entropy bonus.
        loss_type: aggregation of the per-token losses.
    """

    def __init__(
        self,
        epsilon_low: float = 3e-4,
        epsilon_high: float = 4e-4,
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        entropy_coef: float = 0.0,
        loss_type: LossType = "grpo",
    ) -> None:
        super().__init__(
            loss_type=loss_type,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            importance_sampling_level="sequence",
            beta=beta,
            kl_estimator=kl_estimator,
            entropy_coef=entropy_coef,
        )
