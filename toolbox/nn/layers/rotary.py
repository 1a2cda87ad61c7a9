"""Rotary position embeddings (RoPE), in the rotate-half layout of Llama and Hugging Face.

Not a registered layer: attention layers own one and apply it to their queries and keys.
"""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Rotates query and key channels by angles proportional to the token's position.

    Channel pair ``(i, i + head_dim/2)`` turns at frequency ``theta ** (-2i / head_dim)``; the dot
    product of a rotated query and key then depends only on their relative position.

    Args:
        head_dim: size of one attention head; must be even.
        theta: base of the frequencies (10000 in Llama 2; larger bases suit longer contexts).
    """

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head size, got {head_dim}")
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` and ``k`` of shape ``(batch, heads, seq, head_dim)`` by ``position_ids``
        of shape ``(batch, seq)``; angles are computed in float32 whatever the input dtype."""
        angles = position_ids[:, :, None].float() * self.inv_freq.float()[None, None, :]
        angles = torch.cat([angles, angles], dim=-1)[:, None]  # (batch, 1, seq, head_dim)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)
