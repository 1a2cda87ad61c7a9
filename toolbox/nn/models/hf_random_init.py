"""``hf_causal_lm``: a small Hugging Face causal LM of any common architecture, with random weights.

``model=hf_causal_lm model.architecture=qwen3`` builds the family's own ``*ForCausalLM`` class from its
own config class, sized like ``tiny_llama``, so everything downstream (trainers, checkpoints,
``save_pretrained``, the engines, eval) sees exactly what it would see with a real checkpoint of
that family. What each family covers here:

| architecture | lean training forward (``trainer.forward``) | torch engine |
|---|---|---|
| llama, mistral | yes | yes |
| qwen2 (q/k/v biases), qwen3 (q/k norms) | yes | yes |
| gemma (GeGLU, scaled embeddings, 1 + weight norms) | falls back to the model's forward | yes |
| gpt2 (learned positions, LayerNorm, Conv1D) | falls back to the model's forward | yes |

The torch engine also serves saved Gemma2 and Gemma 3 text models (not built here) without
attention-logit softcapping; what it refuses it names (``toolbox.serving.engines.torch.architectures``).
"""

from __future__ import annotations

from typing import Literal

from torch import nn

from toolbox.core.bounds import AtLeastOne, Fraction, PositiveFloat
from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn.models.head_sizes import check_heads

Architecture = Literal["llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2"]
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2")


@MODELS.register("hf_causal_lm")
def hf_causal_lm(
    vocab_size: AtLeastOne,
    architecture: Architecture = "llama",
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
    """A ``transformers`` causal LM of ``architecture`` with random weights from torch's current seed.

    Args:
        vocab_size: number of token ids; injected from the tokenizer.
        architecture: llama, mistral, qwen2, qwen3, gemma or gpt2. The lean training forward
            (``trainer.forward``) computes llama, mistral, qwen2 and qwen3; gemma and gpt2 train
            through their own forward. The torch engine serves all six.
        hidden_size: model width.
        num_layers: number of decoder layers.
        num_heads: attention (query) heads; ``hidden_size / num_heads`` must be >= 32.
        num_kv_heads: key/value heads (grouped-query attention; not for gpt2); None: num_heads.
        intermediate_size: inner width of the feed-forward.
        max_position_embeddings: longest sequence the model is configured for.
        tie_word_embeddings: share the input embedding with the output projection (gpt2 always does).
        rope_theta: base of the rotary frequencies (not gpt2: learned positions).
        dropout: attention dropout while training (gpt2: also residual and embedding dropout).
        pad_token_id: id of the padding token; injected from the tokenizer.
        bos_token_id: id of the beginning-of-sequence token; injected from the tokenizer.
        eos_token_id: id of the end-of-sequence token; injected from the tokenizer.
    """
    if architecture not in ARCHITECTURES:
        raise ConfigError(f"model.architecture: {architecture!r}; choose one of {', '.join(ARCHITECTURES)}.")
    check_heads(hidden_size, num_heads, num_kv_heads)
    if architecture == "gpt2" and num_kv_heads not in (None, num_heads):
        raise ConfigError("model.num_kv_heads: gpt2 has no grouped-query attention; leave it null.")
    import transformers

    ids = {"pad_token_id": pad_token_id, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
    if architecture == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_inner=intermediate_size,
            n_positions=max_position_embeddings,
            resid_pdrop=dropout,
            embd_pdrop=dropout,
            attn_pdrop=dropout,
            **ids,
        )
        return transformers.GPT2LMHeadModel(config)
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
    }[architecture]
    extra = {"sliding_window": None} if architecture in ("mistral", "qwen2", "qwen3") else {}
    if architecture == "gemma":
        extra["hidden_activation"] = "gelu_pytorch_tanh"
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        attention_dropout=dropout,
        **extra,
        **ids,
    )
    return model_class(config)
