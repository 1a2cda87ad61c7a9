"""What our language models return: the fields of Hugging Face's ``CausalLMOutput`` we use."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CausalLMOutput:
    """The result of a causal language model's forward pass.

    Attributes:
        logits: next-token scores, shape ``(batch, seq_len, vocab_size)``; position ``t`` predicts
            token ``t + 1``.
        loss: mean next-token cross-entropy over the labels that are not ``-100``; ``None`` when no
            labels were given.
    """

    logits: torch.Tensor
    loss: torch.Tensor | None = None
