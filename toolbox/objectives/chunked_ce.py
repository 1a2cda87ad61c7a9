"""Cross entropy over a large vocabulary without the full float32 logits.

``chunked_cross_entropy(hidden, weight, targets)`` is ``F.cross_entropy(hidden @ weight.T,
targets, reduction="sum")`` computed ``chunk_size`` tokens at a time, as Liger's fused linear cross
entropy and TRL's chunked log-probs do: each chunk's logits (``chunk_size x V`` in float32) live only
while that chunk's loss and gradients are taken, in the forward, so memory holds one chunk's logits
instead of ``N x V`` (for 4,096 tokens of a 32k vocabulary, 512 MB become 16 MB at chunk 128) and
the backward only scales the stored gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor

IGNORE = -100


class _ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int) -> Tensor:
        grad_hidden = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=torch.float32)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_size):
            h = hidden[start : start + chunk_size]
            t = targets[start : start + chunk_size]
            keep = t != IGNORE
            logits = (h @ weight.T).float()
            lse = torch.logsumexp(logits, dim=-1)
            safe = t.clamp(min=0)
            picked = logits.gather(1, safe[:, None]).squeeze(1)
            loss += ((lse - picked) * keep).sum()
            # d loss / d logits = softmax - one_hot(target), zero on ignored rows
            grad = torch.exp(logits - lse[:, None])
            grad[torch.arange(len(t), device=t.device), safe] -= 1.0
            grad *= keep[:, None]
            grad_hidden[start : start + chunk_size] = (grad.to(weight.dtype) @ weight).to(hidden.dtype)
            grad_weight += grad.T @ h.float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype),
            grad_weight * grad_loss.to(grad_weight.dtype),
            None,
            None,
        )


def chunked_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int = 256) -> Tensor:
    """The summed next-token cross entropy of ``hidden @ weight.T`` against ``targets``.

    Args:
        hidden: ``[N, H]`` hidden states of the scored positions.
        weight: ``[V, H]`` the output layer's weight (no bias).
        targets: ``[N]`` token ids; ``-100`` rows are not scored.
        chunk_size: tokens whose float32 logits exist at once.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size}: set a positive number of tokens per chunk (e.g. 256).")
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"chunked_cross_entropy: hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} must be "
            "[N, H] and [V, H]; flatten the batch's scored positions first."
        )
    return _ChunkedCrossEntropy.apply(hidden, weight, targets, chunk_size)
