"""``transformer_lm``: our own small decoder-only language model, assembled from layer specs.

The architecture is a pre-norm transformer::

    x = embed(input_ids)
    for each block:
        x = x + dropout(attention(norm(x)))
        x = x + dropout(feedforward(norm(x)))
    logits = lm_head(norm(x))

Positions are **rotary**, applied inside the attention layer (``attention/mha`` with its default
``rotary: true``); there is no learned position table. With the default slots (``norm/rmsnorm``,
``attention/mha``, ``feedforward/swiglu``) the model computes exactly what a Hugging Face Llama of
the same sizes computes. When no ``position_ids`` are given they are counted from the attention
mask, so a left-padded sequence gets the same positions, and the same logits, as unpadded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.bounds import AtLeastOne, Fraction
from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn.layer_spec import build_layer, config_path
from toolbox.nn.outputs import CausalLMOutput

IGNORE_INDEX = -100
"""Label value that the loss skips (prompt and padding tokens), as in Hugging Face."""

INIT_STD = 0.02
"""Standard deviation of the normal initialisation of Linear and Embedding weights."""


class TransformerBlock(nn.Module):
    """One pre-norm decoder block: attention then feed-forward, each on a residual branch."""

    def __init__(
        self,
        attn_norm: nn.Module,
        attention: nn.Module,
        ffn_norm: nn.Module,
        feedforward: nn.Module,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.attention = attention
        self.ffn_norm = ffn_norm
        self.feedforward = feedforward
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor
    ) -> torch.Tensor:
        h = self.attention(self.attn_norm(x), attention_mask=attention_mask, position_ids=position_ids)
        x = x + self.dropout(h)
        return x + self.dropout(self.feedforward(self.ffn_norm(x)))


@MODELS.register("transformer_lm")
class TransformerLM(nn.Module):
    """A small causal language model whose norm, attention and feed-forward are layer specs.

    ``forward(input_ids, attention_mask=None, position_ids=None, labels=None)`` returns a
    ``CausalLMOutput`` with ``.logits`` and, when ``labels`` are given, ``.loss`` (labels are shifted
    inside, as in Hugging Face). Positions are rotary, applied by the attention layer. Weights are
    drawn from torch's current seed.

    Args:
        vocab_size: number of token ids; injected from the tokenizer.
        hidden_size: model width; injected into the slots as ``dim``.
        num_layers: number of decoder blocks.
        num_heads: number of attention heads; injected into the attention slot. Must divide
            ``hidden_size``.
        max_position_embeddings: longest sequence the model accepts.
        norm: layer spec of the norms (before attention, before the feed-forward, and final),
            e.g. ``{"name": "norm/layernorm"}``.
        feedforward: layer spec of each block's feed-forward, e.g.
            ``{"name": "feedforward/gelu", "hidden_dim": 256}``.
        attention: layer spec of each block's self-attention, e.g.
            ``{"name": "attention/mha", "rope_theta": 10000.0}``.
        dropout: dropout probability on the embeddings and on each residual branch while training.
        tie_word_embeddings: share the input embedding matrix with the output projection.
    """

    def __init__(
        self,
        vocab_size: AtLeastOne,
        hidden_size: AtLeastOne = 64,
        num_layers: AtLeastOne = 2,
        num_heads: AtLeastOne = 2,
        max_position_embeddings: AtLeastOne = 256,
        norm: dict[str, Any] = {"name": "norm/rmsnorm"},  # noqa: B006 - a config default, never mutated
        feedforward: dict[str, Any] = {"name": "feedforward/swiglu", "hidden_dim": 256},  # noqa: B006
        attention: dict[str, Any] = {"name": "attention/mha"},  # noqa: B006
        dropout: Fraction = 0.0,
        tie_word_embeddings: bool = True,
    ) -> None:
        super().__init__()
        if num_heads < 1 or hidden_size % num_heads:
            raise ConfigError(
                f"model.num_heads={num_heads} does not divide model.hidden_size={hidden_size}; "
                f"choose a divisor, e.g. model.num_heads={_largest_divisor(hidden_size, num_heads)}."
            )
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings

        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        with config_path("model"):
            self.layers = nn.ModuleList(
                TransformerBlock(
                    attn_norm=build_layer(norm, path="norm", role="norm", dim=hidden_size),
                    attention=build_layer(
                        attention, path="attention", role="attention", dim=hidden_size, num_heads=num_heads
                    ),
                    ffn_norm=build_layer(norm, path="norm", role="norm", dim=hidden_size),
                    feedforward=build_layer(
                        feedforward, path="feedforward", role="feedforward", dim=hidden_size
                    ),
                    dropout=dropout,
                )
                for _ in range(num_layers)
            )
            self.norm = build_layer(norm, path="norm", role="norm", dim=hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        self.apply(_init_weights)
        if tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """Score every next token of ``input_ids``.

        Args:
            input_ids: ``(batch, seq)`` token ids.
            attention_mask: ``(batch, seq)``, 1 for real tokens and 0 for padding (either side).
            position_ids: ``(batch, seq)`` positions; ``None`` to count them from the mask.
            labels: ``(batch, seq)`` target ids, usually ``input_ids`` with ignored positions set
                to -100; shifted inside, so ``labels[:, t + 1]`` is scored by ``logits[:, t]``.

        Returns:
            ``CausalLMOutput(logits, loss)``; ``loss`` is ``None`` without labels.
        """
        seq = input_ids.shape[-1]
        if seq > self.max_position_embeddings:
            raise ValueError(
                f"a sequence of {seq} tokens exceeds max_position_embeddings="
                f"{self.max_position_embeddings}; raise model.max_position_embeddings or truncate"
            )
        if position_ids is None:
            position_ids = positions_from_mask(input_ids, attention_mask)
        x = self.dropout(self.embed_tokens(input_ids))
        for block in self.layers:
            x = block(x, attention_mask, position_ids)
        logits = self.lm_head(self.norm(x))
        loss = None if labels is None else next_token_loss(logits, labels)
        return CausalLMOutput(logits=logits, loss=loss)


def positions_from_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Position of each token among the real tokens of its row (padding gets 0)."""
    if attention_mask is None:
        batch, seq = input_ids.shape
        return torch.arange(seq, device=input_ids.device).expand(batch, seq)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits[:, t]`` against ``labels[:, t + 1]``, skipping -100 labels."""
    vocab = logits.shape[-1]
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, vocab).float(),
        labels[:, 1:].reshape(-1).to(logits.device),
        ignore_index=IGNORE_INDEX,
    )


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=INIT_STD)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=INIT_STD)


def _largest_divisor(hidden_size: int, num_heads: int) -> int:
    return max(d for d in range(1, max(min(num_heads, hidden_size), 1) + 1) if hidden_size % d == 0)
