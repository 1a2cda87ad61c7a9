"""Truncated importance sampling: correct for completions sampled by another policy than π_old.

An engine samples with its own copy of the weights (stale by up to ``max_staleness`` updates in
asynchronous GRPO, or merely computed by other kernels), so the tokens come from π_sampler, not
from the π_old the clipped loss assumes. Each token's loss is weighted by the importance ratio
``π_old / π_sampler``, truncated at ``cap`` (TIS; TRL's ``vllm_importance_sampling_correction``
and verl's ``rollout_is``)::

    w, stats = importance_weights(old_logps, sampling_logps, mask, "token_truncate", cap=3.0)
    per_token_loss = per_token_loss * w

Modes: ``token_truncate`` (one ratio per token, ``min(ratio, cap)``), ``token_mask`` (tokens whose
ratio exceeds ``cap`` get weight 0, the others their ratio), ``sequence_truncate`` /
``sequence_mask`` (the product of the sequence's token ratios, the same for every token of it).
``stats``: the ratio's mean/min/max over the scored tokens (or sequences) before truncation and the
fraction above ``cap``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

ImportanceMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
IMPORTANCE_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@torch.no_grad()
def importance_weights(
    old_logprobs: Tensor, sampling_logprobs: Tensor, mask: Tensor, mode: ImportanceMode, cap: float
) -> tuple[Tensor, dict[str, float]]:
    """The per-token weights ``[B, T]`` (``[B, 1]`` for a sequence mode) and their statistics."""
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"importance sampling mode {mode!r}; choose one of {', '.join(IMPORTANCE_MODES)}")
    if cap <= 0:
        raise ValueError(f"importance sampling cap {cap}; it must be > 0")
    mask = mask.to(old_logprobs.dtype)
    log_ratio = (old_logprobs - sampling_logprobs.to(old_logprobs.dtype)) * mask
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)
        scored = mask.sum(-1, keepdim=True) > 0
    else:
        scored = mask > 0
    ratio = torch.exp(log_ratio.clamp(max=80.0))  # exp(80) is finite in float32; capped below anyway
    above = ratio > cap
    if mode.endswith("truncate"):
        weights = ratio.clamp(max=cap)
    else:
        weights = torch.where(above, torch.zeros_like(ratio), ratio)
    values = ratio[scored]
    stats = {
        "is/ratio_mean": values.mean().item() if values.numel() else 1.0,
        "is/ratio_min": values.min().item() if values.numel() else 1.0,
        "is/ratio_max": values.max().item() if values.numel() else 1.0,
        "is/clip_fraction": above[scored].float().mean().item() if values.numel() else 0.0,
    }
    return weights, stats
