"""``tiny_llama``: a small Hugging Face Llama with random weights, for training from scratch here."""

from __future__ import annotations

from torch import nn

from toolbox.core.bounds import AtLeastOne, Fraction, PositiveFloat
from toolbox.core.registries import MODELS
from toolbox.nn.models.hf_random_init import hf_causal_lm


@MODELS.register("tiny_llama")
def tiny_llama(
    vocab_size: AtLeastOne,
    hidden_size: AtLeastOne = 64,
    num_layers: AtLeastOne = 2,
    num_heads: AtLeastOne = 2,
    num_kv_heads: AtLeastOne | None = None,
    intermediate_size: AtLeastOne = 256,
    max_position_embeddings: AtLeastOne = 256,
    tie_word_embeddings: bool = True,
    rope_theta: PositiveFloat = 10000.0,
    dropout: Fraction = 0.0,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> nn.Module:
    """A ``transformers.LlamaForCausalLM`` with random weights drawn from torch's current seed.

    It saves with ``save_pretrained`` and reloads with ``AutoModelForCausalLM``, so the HF, vLLM and
    torch engines all serve it. The head size ``hidden_size / num_heads`` must be at least 32.

    Args:
        vocab_size: number of token ids; injected from the tokenizer.
        hidden_size: model width.
        num_layers: number of decoder layers.
        num_heads: number of attention (query) heads; ``hidden_size / num_heads`` must be >= 32.
        num_kv_heads: number of key/value heads for grouped-query attention; must divide
            ``num_heads``. ``None`` for ``num_heads`` (plain multi-head attention).
        intermediate_size: inner width of the SwiGLU feed-forward.
        max_position_embeddings: longest sequence the model is configured for.
        tie_word_embeddings: share the input embedding matrix with the output projection.
        rope_theta: base of the rotary position embedding frequencies.
        dropout: dropout probability on the attention weights while training.
        pad_token_id: id of the padding token; injected from the tokenizer.
        bos_token_id: id of the beginning-of-sequence token; injected from the tokenizer.
        eos_token_id: id of the end-of-sequence token; injected from the tokenizer.
    """
    return hf_causal_lm(
        vocab_size,
        architecture="llama",
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        rope_theta=rope_theta,
        dropout=dropout,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )
