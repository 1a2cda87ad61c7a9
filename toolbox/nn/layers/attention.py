"""Attention layers (role ``attention``): causal self-attention for decoder-only models."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.registries import LAYERS
from toolbox.nn.layers.rotary import RotaryEmbedding


@LAYERS.register("attention/mha")
class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention through ``torch.nn.functional.scaled_dot_product_attention``.

    Each token attends to itself and the earlier tokens that the attention mask keeps. Positions
    enter through rotary embeddings applied to queries and keys (``rotary: true``); with
    ``rotary: false`` the layer is position-blind and the model must add positions itself. The
    projections are named like Hugging Face's ``LlamaAttention`` (``q_proj``, ``k_proj``,
    ``v_proj``, ``o_proj``). There is no KV cache: every call attends over the whole sequence.

    Args:
        dim: model width; injected by the owning model. Must be divisible by ``num_heads``.
        num_heads: number of attention heads; injected by the owning model.
        bias: give the four projections an additive bias (Llama has none).
        dropout: dropout probability on the attention weights while training.
        rotary: apply rotary position embeddings to queries and keys.
        rope_theta: base of the rotary frequencies.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        bias: bool = False,
        dropout: float = 0.0,
        rotary: bool = True,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"attention width {dim} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(dim, dim, bias=bias)
        self.v_proj = nn.Linear(dim, dim, bias=bias)
        self.o_proj = nn.Linear(dim, dim, bias=bias)
        self.rotary = RotaryEmbedding(self.head_dim, rope_theta) if rotary else None

    def forward(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend over ``x`` of shape ``(batch, seq, dim)``.

        Args:
            x: the input sequence.
            attention_mask: ``(batch, seq)``, 1 for real tokens and 0 for padding; padded keys are
                never attended to. ``None`` keeps every token.
            position_ids: ``(batch, seq)`` positions for the rotary embeddings; ``None`` for
                ``0 .. seq-1``.

        Returns:
            A tensor of the shape of ``x``.
        """
        batch, seq, dim = x.shape
        q, k, v = (
            proj(x).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        if self.rotary is not None:
            if position_ids is None:
                position_ids = torch.arange(seq, device=x.device).expand(batch, seq)
            q, k = self.rotary(q, k, position_ids)
        mask = None if attention_mask is None else causal_padding_mask(attention_mask)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, dim))


def causal_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """The boolean ``(batch, 1, seq, seq)`` mask of which key each query may attend to.

    A query sees the earlier and current keys that are not padding, and always itself: a padding
    query would otherwise see no key at all and produce NaN, which would spread through the
    gradients even though its output is never used.
    """
    seq = attention_mask.shape[-1]
    device = attention_mask.device
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
    keep = causal & attention_mask.bool()[:, None, None, :]
    return keep | torch.eye(seq, dtype=torch.bool, device=device)
