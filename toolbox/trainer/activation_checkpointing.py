"""Activation checkpointing: trade about one more forward for the memory of the activations."""

from __future__ import annotations

import torch

from toolbox.core.errors import ConfigError


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each layer's activations in the backward pass instead of keeping them (HF models,
    adapted ones too): less memory, about one more forward of compute; results are unchanged."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise ConfigError(
            f"trainer.activation_checkpointing: {type(model).__name__} has no gradient_checkpointing_enable; "
            "it works with Hugging Face models (model=tiny_llama, hf_causal_lm or pretrained). Set it to false."
        )
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})
