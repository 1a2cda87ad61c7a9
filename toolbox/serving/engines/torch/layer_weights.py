"""The tensors of the slot runner's forward, and the matmul kernels it runs them through.

``LayerWeights.of(layer, ...)`` gathers one decoder layer's tensors: q/k/v fused into one matrix and
gate/up into another (two matmuls per layer instead of five; GPT-2's c_attn is fused already), a
Llama or Gemma RMSNorm as ``F.rms_norm`` arguments (bit-identical in float32), a LayerNorm as
``F.layer_norm``'s, the rest the model's own tensors. On a CPU with
oneDNN each projection weight can be reordered once into oneDNN's blocked layout
(``onednn_pack``) and multiplied by ``onednn_linear``; otherwise ``keep_weight`` and ``F.linear``.
``SlotRunner`` (``runner.py``) rebuilds these when the model's parameters change.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# below this hidden size oneDNN's ~12 us per call outweighs its faster kernel (measured here: equal
# at 384 for one row, 1.6x faster for 8 rows at 512, 5x slower at 64)
ONEDNN_MIN_WIDTH = 384


def onednn_usable(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether oneDNN's reordered-weight matmul runs here: a CPU model in float32 or bfloat16."""
    return (
        device.type == "cpu"
        and dtype in (torch.float32, torch.bfloat16)
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` reordered for oneDNN's matmul (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` with a weight packed by ``onednn_pack``."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def keep_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight as it is (the pack of ``F.linear``)."""
    return weight


def norm_of(module: Any, fast: bool) -> Any:
    """A norm as ``F.rms_norm`` / ``F.layer_norm`` arguments where that is bit-identical, else the module.

    ``nn.LayerNorm`` (GPT-2): ``(weight, bias, eps)`` (its own forward is that call). With ``fast``
    (a float32 model): a Llama RMSNorm ``(weight, eps)``, a Gemma RMSNorm ``(1 + weight, eps)``
    (equal to the module bit for bit in float32: checked in tests/serving). Otherwise the module.
    """
    if isinstance(module, nn.LayerNorm):
        return (module.weight, module.bias, module.eps)
    name = type(module).__name__
    if not fast or not name.endswith("RMSNorm"):
        return module
    if name.startswith("Gemma") and hasattr(module, "eps"):
        with torch.no_grad():
            return (1.0 + module.weight, module.eps)
    if hasattr(module, "variance_epsilon"):
        return (module.weight, module.variance_epsilon)
    return module


def apply_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """A norm from ``norm_of`` applied to ``x``."""
    if type(norm) is tuple:
        if len(norm) == 3:
            return F.layer_norm(x, (x.shape[-1],), norm[0], norm[1], norm[2])
        return F.rms_norm(x, (x.shape[-1],), norm[0], norm[1])
    return norm(x)


def _cat(tensors: list[Any]) -> torch.Tensor | None:
    return None if tensors[0] is None else torch.cat(tensors)


class LayerWeights:
    """The tensors of one decoder layer as the forward uses them (see ``SlotRunner._weights``).

    ``w_gu`` is gate and up stacked (a gated MLP) or the up projection alone (GPT-2's ``c_fc``;
    ``gated`` False); ``attn_out_norm`` / ``mlp_out_norm`` are Gemma2's norms after attention and
    after the MLP (None elsewhere).
    """

    __slots__ = (
        "norm1",
        "w_qkv",
        "b_qkv",
        "q_norm",
        "k_norm",
        "w_o",
        "b_o",
        "attn_out_norm",
        "norm2",
        "gated",
        "w_gu",
        "b_gu",
        "w_down",
        "b_down",
        "mlp_out_norm",
    )

    @classmethod
    def of(cls, layer: Any, model_type: str, fast_norm: bool, pack: Any) -> LayerWeights:
        """The layer's tensors; ``pack`` prepares each projection weight for the runner's linear."""
        if model_type == "gpt2":
            return cls._of_gpt2(layer, pack)
        a, m = layer.self_attn, layer.mlp
        w = cls()
        w.norm1 = norm_of(layer.input_layernorm, fast_norm)
        w.w_qkv = pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        w.b_qkv = _cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
        w.q_norm = getattr(a, "q_norm", None)
        w.k_norm = getattr(a, "k_norm", None)
        w.w_o, w.b_o = pack(a.o_proj.weight), a.o_proj.bias
        if model_type in ("gemma2", "gemma3_text"):  # a norm after attention; norms before/after the MLP
            w.attn_out_norm = norm_of(layer.post_attention_layernorm, fast_norm)
            w.norm2 = norm_of(layer.pre_feedforward_layernorm, fast_norm)
            w.mlp_out_norm = norm_of(layer.post_feedforward_layernorm, fast_norm)
        else:
            w.attn_out_norm = w.mlp_out_norm = None
            w.norm2 = norm_of(layer.post_attention_layernorm, fast_norm)
        w.gated = True
        w.w_gu = pack(torch.cat([m.gate_proj.weight, m.up_proj.weight]))
        w.b_gu = _cat([m.gate_proj.bias, m.up_proj.bias])
        w.w_down, w.b_down = pack(m.down_proj.weight), m.down_proj.bias
        return w

    @classmethod
    def _of_gpt2(cls, layer: Any, pack: Any) -> LayerWeights:
        """GPT-2's block: Conv1D weights are ``[in, out]``, so each is used transposed (a view:
        ``F.linear`` then runs the same ``addmm`` as Conv1D); c_attn is already q/k/v fused."""
        a, m = layer.attn, layer.mlp
        w = cls()
        w.norm1, w.norm2 = norm_of(layer.ln_1, False), norm_of(layer.ln_2, False)
        w.w_qkv, w.b_qkv = pack(a.c_attn.weight.t()), a.c_attn.bias
        w.q_norm = w.k_norm = w.attn_out_norm = w.mlp_out_norm = None
        w.w_o, w.b_o = pack(a.c_proj.weight.t()), a.c_proj.bias
        w.gated = False
        w.w_gu, w.b_gu = pack(m.c_fc.weight.t()), m.c_fc.bias
        w.w_down, w.b_down = pack(m.c_proj.weight.t()), m.c_proj.bias
        return w
