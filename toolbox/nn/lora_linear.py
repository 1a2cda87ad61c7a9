"""Linear layers, plain or carrying a plain peft LoRA adapter, computed straight from their tensors.

What the lean training forward (:mod:`toolbox.nn.llama_training`) calls for each projection of an
adapted model, instead of peft's module: the same function,
``base(x) + scaling * lora_B(lora_A(x))``, in fewer ops. The adapter's update is added by the
matrix product that computes it (``addmm``, the scaling as its ``alpha``) instead of a product, a
multiply over the output and an add; a residual that follows the projection is added the same
way (for a plain ``nn.Linear`` neither: it computes exactly as its module). Several projections of one input (q, k and v) share one product for the base and one for
every ``lora_A``; their ``lora_B`` form one block-diagonal matrix, so one more product adds all
updates. The sums are the same as peft's, reassociated: equal up to float rounding.

"Plain" is one active adapter over an unquantized ``nn.Linear``, no DoRA, no dropout (an identity; with dropout peft draws a mask),
no LoRA bias, not merged. Inside peft's ``disable_adapter()``, or with ``adapters=False`` (how the
preference reference reads the base without toggling peft's flags on every layer), only the base
is computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def is_plain_lora(module: nn.Module) -> bool:
    """Whether ``module`` is a peft LoRA ``Linear`` whose forward is base + scaling * B(A(x))."""
    # exactly nn.Linear: bitsandbytes' quantized layers subclass it but hold packed weights
    if not hasattr(module, "lora_A") or type(getattr(module, "base_layer", None)) is not nn.Linear:
        return False
    if getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return False
    active = list(getattr(module, "active_adapters", []))
    if len(active) != 1 or active[0] not in module.lora_A:
        return False
    adapter = active[0]
    if module.use_dora.get(adapter, False) or not isinstance(module.lora_dropout[adapter], nn.Identity):
        return False
    if getattr(module, "lora_bias", {}).get(adapter, False):
        return False
    return isinstance(module.lora_A[adapter], nn.Linear) and isinstance(module.lora_B[adapter], nn.Linear)


def is_computable(module: nn.Module) -> bool:
    """A plain ``nn.Linear`` or a plain LoRA linear: :func:`linear` computes it."""
    return type(module) is nn.Linear or is_plain_lora(module)


def _base(module: nn.Module) -> nn.Linear:
    return module if type(module) is nn.Linear else module.base_layer


def _adapted(module: nn.Module, adapters: bool) -> bool:
    """Whether the adapter's update is added (a LoRA linear outside ``disable_adapter()``)."""
    return adapters and type(module) is not nn.Linear and not module.disable_adapters


def _base_product(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None) -> Tensor:
    if residual is None:
        return F.linear(x, weight, bias)
    if bias is None:
        return torch.addmm(residual, x, weight.t())
    return residual + F.linear(x, weight, bias)


def linear(module: nn.Module, x: Tensor, residual: Tensor | None = None, adapters: bool = True) -> Tensor:
    """``module(x)`` (plus ``residual``) for a 2-D ``x`` (``[tokens, in]``); see the module doc.
    A plain ``nn.Linear`` computes exactly as its module (then the residual is added), so a model
    without adapters gets bitwise what it got before."""
    if type(module) is nn.Linear:
        out = F.linear(x, module.weight, module.bias)
        return out if residual is None else residual + out
    base = module.base_layer
    out = _base_product(x, base.weight, base.bias, residual)
    if not _adapted(module, adapters):  # the base alone
        return out
    name = module.active_adapters[0]
    down = F.linear(x, module.lora_A[name].weight)  # [tokens, r]
    return torch.addmm(out, down, module.lora_B[name].weight.t(), alpha=module.scaling[name])


def fused_linear(modules: Sequence[nn.Module], x: Tensor, adapters: bool = True) -> Tensor:
    """``cat([m(x) for m in modules], -1)`` in one base product and, with adapters, two more."""
    bases = [_base(m) for m in modules]
    biases = [b.bias for b in bases]
    bias = torch.cat(biases) if biases[0] is not None else None
    out = F.linear(x, torch.cat([b.weight for b in bases]), bias)
    if not _adapted(modules[0], adapters):
        return out
    names = [m.active_adapters[0] for m in modules]
    down = F.linear(x, torch.cat([m.lora_A[n].weight for m, n in zip(modules, names, strict=True)]))
    scalings = [m.scaling[n] for m, n in zip(modules, names, strict=True)]
    ups = [m.lora_B[n].weight for m, n in zip(modules, names, strict=True)]
    alpha = scalings[0]
    if any(s != alpha for s in scalings):  # different scalings: each block carries its own
        ups, alpha = [u * s for u, s in zip(ups, scalings, strict=True)], 1.0
    return torch.addmm(out, down, torch.block_diag(*ups).t(), alpha=alpha)
