"""The attention-head layout a tiny model may have: ``hidden_size`` split into heads of at least 32.

Every model built here from a config (``tiny_llama``, ``hf_causal_lm``, the learned reward's backbone)
checks its heads with ``check_heads`` before building, and fails with the values that would work.
"""

from __future__ import annotations

from toolbox.core.errors import ConfigError

MIN_HEAD_SIZE = 32
"""vLLM's CPU attention refuses heads smaller than this, and we serve tiny models with vLLM."""


def check_heads(hidden_size: int, num_heads: int, num_kv_heads: int | None) -> None:
    """Fail with the fix when the head layout is impossible or too small for vLLM."""
    if num_heads < 1 or hidden_size % num_heads:
        raise ConfigError(
            f"model.num_heads={num_heads} does not divide model.hidden_size={hidden_size}; "
            f"{_suggest(hidden_size, num_heads)}."
        )
    head_size = hidden_size // num_heads
    if head_size < MIN_HEAD_SIZE:
        raise ConfigError(
            f"model.num_heads={num_heads} with model.hidden_size={hidden_size} gives attention heads "
            f"of size {head_size}, but vLLM's CPU attention needs a head size >= {MIN_HEAD_SIZE}; "
            f"{_suggest(hidden_size, num_heads)}."
        )
    if num_kv_heads is not None and (num_kv_heads < 1 or num_heads % num_kv_heads):
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ConfigError(
            f"model.num_kv_heads={num_kv_heads} must divide model.num_heads={num_heads}; "
            f"use one of {divisors}."
        )


def _suggest(hidden_size: int, num_heads: int) -> str:
    """A valid choice: the most heads that fit ``hidden_size``, or the width ``num_heads`` needs."""
    width = f"model.hidden_size={MIN_HEAD_SIZE * max(num_heads, 1)}"
    fits = [h for h in range(1, hidden_size // MIN_HEAD_SIZE + 1) if hidden_size % h == 0]
    if fits:
        return f"set model.num_heads={fits[-1]} (or {width})"
    return f"set {width}"
