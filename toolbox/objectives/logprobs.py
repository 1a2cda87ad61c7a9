"""Log-probabilities of given tokens under a causal LM: what preference and policy losses consume."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def selective_log_softmax(logits: Tensor, tokens: Tensor) -> Tensor:
    """``log_softmax(logits)[..., tokens]`` without materialising the full log-softmax.

    ``logits`` is ``[..., V]``, ``tokens`` ``[...]``; computed in float32 (gather minus logsumexp).
    """
    logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy of the softmax of ``logits`` (``[..., V] -> [...]``)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    logits_to_keep: int | None = None,
    with_entropy: bool = False,
    temperature: float = 1.0,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs of ``input_ids[:, 1:]`` (each token given the ones before it).

    Returns ``[B, L-1]`` (or ``[B, logits_to_keep]``: the last tokens only, e.g. a completion after
    a left-padded prompt), and the per-position entropy when ``with_entropy``. ``temperature``
    divides the logits first, matching a sampler that used it.
    """
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False}
    if logits_to_keep is not None:
        kwargs["logits_to_keep"] = logits_to_keep + 1
    logits = model(**kwargs).logits[:, :-1]
    targets = input_ids[:, 1:] if logits_to_keep is None else input_ids[:, -logits_to_keep:]
    if temperature != 1.0:
        logits = logits / temperature
    logps = selective_log_softmax(logits, targets)
    return logps, (entropy_from_logits(logits) if with_entropy else None)
