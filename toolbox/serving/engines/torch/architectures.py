"""How each causal-LM family maps onto the slot runner's decoder layer, and what it refuses.

The runner (``runner.py``) computes every family with one pre-norm layer::

    x = x + out_norm(o_proj(attention(rope(qk_norm(qkv(norm1(x)))))))
    x = x + mlp_out_norm(down(act(gate) * up   or   act(up)))       # on norm2(x)

and one embedding ``F.embedding(ids, wte) * embed_scale + wpe[positions]``. ``Layout(model)``
says which pieces a model has:

- llama, mistral, qwen2 (q/k/v biases), qwen3 (q/k norms): ``model.layers``, RMSNorm, rope,
  SiLU-gated MLP, a plain embedding;
- gemma: RMSNorm ``x * (1 + w)``, rope with any ``head_dim``, GeGLU, the embedding scaled by
  ``sqrt(hidden)`` (its ``embed_scale``);
- gemma2: as gemma, with a norm after attention and norms before and after the MLP, the
  attention scaled by ``query_pre_attn_scalar`` and the final logits softcapped;
- gemma3_text: as gemma2, with q/k norms and a rotary base per layer type (sliding, full);
- gpt2: ``transformer.h``, LayerNorms with bias, learned positions (``wpe``), the fused Conv1D
  ``c_attn`` (weights used transposed), a scaling per layer, a GELU MLP.

Refused, with the config field named: attention-logit softcapping (``attn_logit_softcapping``:
the attention would leave SDPA), bidirectional attention (``use_bidirectional_attention``), a
sliding window shorter than ``max_model_len`` (checked by the runner), GPT-2's
``add_cross_attention`` and ``reorder_and_upcast_attn``. Gemma 3's
multimodal ``Gemma3ForConditionalGeneration`` is another model type: ``engine=hf``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.errors import ConfigError

LLAMA_LAYOUT = ("llama", "mistral", "qwen2", "qwen3")
GEMMA = ("gemma", "gemma2", "gemma3_text")
#: families whose layers norm the attention and MLP outputs too (pre/post feed-forward norms)
POST_NORMS = ("gemma2", "gemma3_text")
SUPPORTED = (*LLAMA_LAYOUT, *GEMMA, "gpt2")


def _refuse(model_type: str, field: str, value: Any, fix: str) -> ConfigError:
    return ConfigError(
        f"engine 'torch' does not implement {model_type}'s {field}={value!r}; {fix}, or use engine=hf "
        f"(transformers generate)."
    )


def check_supported(model: Any) -> str:
    """The model's ``model_type`` if the runner computes it, else a ConfigError naming why not."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    inner = getattr(model, "transformer" if model_type == "gpt2" else "model", None)
    if model_type not in SUPPORTED or not (hasattr(inner, "layers") or hasattr(inner, "h")):
        raise ConfigError(
            f"engine 'torch' runs {', '.join(SUPPORTED)} models, not "
            f"{model_type or type(model).__name__}; use engine=hf (transformers generate) for it."
        )
    if model_type == "gpt2":
        if getattr(config, "add_cross_attention", False):
            raise _refuse(model_type, "add_cross_attention", True, "set it false")
        if getattr(config, "reorder_and_upcast_attn", False):
            raise _refuse(model_type, "reorder_and_upcast_attn", True, "set it false")
    if model_type in POST_NORMS and getattr(config, "attn_logit_softcapping", None) is not None:
        raise _refuse(
            model_type, "attn_logit_softcapping", config.attn_logit_softcapping, "set it null (None)"
        )
    if getattr(config, "use_bidirectional_attention", False):
        raise _refuse(model_type, "use_bidirectional_attention", True, "set it false")
    return model_type


class Layout:
    """The modules and constants of one model as the runner's forward reads them."""

    def __init__(self, model: Any) -> None:
        self.model_type = check_supported(model)
        config = model.config
        gpt2 = self.model_type == "gpt2"
        inner = model.transformer if gpt2 else model.model
        self.layers = list(inner.h if gpt2 else inner.layers)
        self.embed: nn.Embedding = inner.wte if gpt2 else inner.embed_tokens
        self.position_embed: nn.Embedding | None = inner.wpe if gpt2 else None
        scale = getattr(self.embed, "embed_scale", None)  # gemma's scaled word embedding
        self.embed_scale: torch.Tensor | None = None if scale is None else scale
        self.final_norm = inner.ln_f if gpt2 else inner.norm
        self.rotary = None if gpt2 else inner.rotary_emb
        attn = self.layers[0].attn if gpt2 else self.layers[0].self_attn
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(attn.head_dim)
        self.scalings = [
            float(getattr(layer.attn if gpt2 else layer.self_attn, "scaling", self.head_dim**-0.5))
            for layer in self.layers
        ]
        act = self.layers[0].mlp.act if gpt2 else self.layers[0].mlp.act_fn
        self.act = F.silu if isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation" else act
        self.logit_softcap = getattr(config, "final_logit_softcapping", None)
        # Gemma 3: one rotary base per layer type (local sliding layers, global layers)
        per_type = self.model_type == "gemma3_text"
        self.rope_kinds = [config.layer_types[i] if per_type else None for i in range(len(self.layers))]
        self.norms = [self.final_norm, *(n for layer in self.layers for n in self.layer_norms(layer))]

    def layer_norms(self, layer: Any) -> list[Any]:
        """The norms of one layer (what must be cast for the fast path)."""
        if self.model_type == "gpt2":
            return [layer.ln_1, layer.ln_2]
        names = ["input_layernorm", "post_attention_layernorm"]
        if self.model_type in POST_NORMS:
            names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        return [getattr(layer, n) for n in names]

    def rope_is_static(self) -> bool:
        """Whether the rotary tables depend on the positions only (then the runner computes them once)."""
        kind = getattr(self.rotary, "rope_type", "default")
        kinds = set(kind.values()) if isinstance(kind, dict) else {kind}
        return not kinds & {"dynamic", "longrope"}

    def rope(self, x: torch.Tensor, positions: torch.Tensor, kind: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's own rotary module: ``(cos, sin)`` at ``positions`` for layers of ``kind``."""
        return self.rotary(x, positions) if kind is None else self.rotary(x, positions, kind)

    def embed_tokens(self, ids: torch.Tensor, positions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The input of the first layer for ``ids`` at ``positions`` (same shape as ``ids``)."""
        x = F.embedding(ids, weight)
        if self.embed_scale is not None:
            x = x * self.embed_scale.to(x.dtype)
        if self.position_embed is not None:
            x = x + F.embedding(positions, self.position_embed.weight)
        return x

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Gemma2's final softcapping, ``tanh(logits / cap) * cap``; the logits elsewhere."""
        if self.logit_softcap is None:
            return logits
        return torch.tanh(logits / self.logit_softcap) * self.logit_softcap
