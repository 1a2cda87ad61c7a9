"""Log-probabilities of given tokens under a causal LM: what preference and policy losses consume."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from toolbox.nn.adapters import AdapterDisabledReference
from toolbox.nn.llama_training import LlamaTrainingForward, left_padded_as_packed


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
    if isinstance(model, LlamaTrainingForward) and logits_to_keep is not None:
        # the lean forward: the last layer, final norm and output layer only where logits are kept
        rows, length = input_ids.shape
        keep = torch.zeros_like(input_ids, dtype=torch.bool)
        keep[:, length - logits_to_keep - 1 : length - 1] = True
        positions = None
        left_padded = attention_mask is not None and not bool(attention_mask[:, 0].all())
        if left_padded and not model.exact:  # (exact: the model's own forward, bitwise its mask)
            positions, attention_mask = left_padded_as_packed(
                attention_mask, model.model.lm_head.weight.dtype
            )
        logits = model(input_ids, attention_mask, positions, logits_mask=keep).logits.view(
            rows, logits_to_keep, -1
        )
    else:
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "use_cache": False,
        }
        if logits_to_keep is not None:
            kwargs["logits_to_keep"] = logits_to_keep + 1
        logits = model(**kwargs).logits[:, :-1]
    targets = input_ids[:, 1:] if logits_to_keep is None else input_ids[:, -logits_to_keep:]
    if temperature != 1.0:
        logits = logits / temperature
    logps = selective_log_softmax(logits, targets)
    return logps, (entropy_from_logits(logits) if with_entropy else None)


def completion_logps(model: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """Per-row sums of the completion tokens' log-probs, and the completion lengths (``[R]`` each).

    A packed batch (``segments``: each token's sequence) gives them per sequence instead.
    """
    if isinstance(model, AdapterDisabledReference):  # the policy's own (lean) forward, adapters off
        base = model.lean_base(batch["input_ids"], batch["attention_mask"], batch.get("position_ids"))
        if base is not None:  # the lean forward reads the base alone: no flags toggled
            with torch.no_grad():
                return completion_logps(base, batch)
        with model.disabled():
            return completion_logps(model.inner, batch)
    ids, mask = batch["input_ids"], batch["completion_mask"]
    scored = mask[:, 1:].bool()
    inputs = {"input_ids": ids, "attention_mask": batch["attention_mask"]}
    if "segments" in batch:
        inputs["position_ids"] = batch["position_ids"]
    if isinstance(model, LlamaTrainingForward):  # logits only where scored (exact: all, then picked)
        keep = torch.zeros_like(mask, dtype=torch.bool)
        keep[:, :-1] = scored
        logits = model(**inputs, logits_mask=keep).logits
    else:
        logits = model(**inputs, use_cache=False).logits[:, :-1][scored]
    per_token = selective_log_softmax(logits, ids[:, 1:][scored])
    if "segments" not in batch:
        per_row = torch.zeros(scored.shape, dtype=torch.float32, device=ids.device)
        per_row[scored] = per_token
        return per_row.sum(-1), scored.sum(-1).float()
    owner = batch["segments"][:, 1:][scored]  # the sequence of each scored (target) token
    n = int(batch["num_sequences"])
    sums = torch.zeros(n, dtype=torch.float32, device=ids.device).index_add(0, owner, per_token)
    lengths = torch.zeros(n, dtype=torch.float32, device=ids.device).index_add(
        0, owner, torch.ones_like(per_token)
    )
    return sums, lengths
