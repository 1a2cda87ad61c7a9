"""The tensors of the slot runner's forward, and the matmul kernels it runs them through.

``LayerWeights.of(layer, ...)`` gathers one decoder layer's tensors: q/k/v fused into one matrix and
gate/up into another (two matmuls per layer instead of five), a Llama RMSNorm as ``(weight, eps)``
for ``F.rms_norm`` (bit-identical in float32), the rest the model's own tensors. On a CPU with
oneDNN each projection weight can be reordered once into oneDNN's blocked layout
(``onednn_pack``) and multiplied by ``onednn_linear``; otherwise ``keep_weight`` and ``F.linear``.
``SlotRunner`` (``runner.py``) rebuilds these when the model's parameters change.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

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
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` with a weight packed by ``onednn_pack``."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def keep_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight as it is (the pack of ``F.linear``)."""
    return weight


def norm_of(module: Any, fast: bool) -> Any:
    """``(weight, eps)`` for ``F.rms_norm`` (bit-identical to the Llama RMSNorm in float32), else the module."""
    return (module.weight, module.variance_epsilon) if fast else module


def apply_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """A norm from ``norm_of`` applied to ``x``."""
    if type(norm) is tuple:
        return F.rms_norm(x, (x.shape[-1],), norm[0], norm[1])
    return norm(x)


class LayerWeights:
    """The tensors of one decoder layer as the forward uses them (see ``SlotRunner._weights``)."""

    __slots__ = (
        "norm1",
        "w_qkv",
        "b_qkv",
        "q_norm",
        "k_norm",
        "w_o",
        "b_o",
        "norm2",
        "w_gu",
        "b_gu",
        "w_down",
        "b_down",
    )

    @classmethod
    def of(cls, layer: Any, fast_norm: bool, pack: Any) -> LayerWeights:
        """The layer's tensors; ``pack`` prepares each projection weight for the runner's linear."""
        a, m = layer.self_attn, layer.mlp
        w = cls()
        w.norm1 = norm_of(layer.input_layernorm, fast_norm)
        w.norm2 = norm_of(layer.post_attention_layernorm, fast_norm)
        w.w_qkv = pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        w.b_qkv = None if a.q_proj.bias is None else torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
        w.q_norm = getattr(a, "q_norm", None)
        w.k_norm = getattr(a, "k_norm", None)
        w.w_o, w.b_o = pack(a.o_proj.weight), a.o_proj.bias
        w.w_gu = pack(torch.cat([m.gate_proj.weight, m.up_proj.weight]))
        w.b_gu = None if m.gate_proj.bias is None else torch.cat([m.gate_proj.bias, m.up_proj.bias])
        w.w_down, w.b_down = pack(m.down_proj.weight), m.down_proj.bias
        return w
