"""LoRA linears computed from their tensors (toolbox.nn.lora_linear) equal peft's modules, values and
gradients; the lean forward reads the base alone without toggling peft's flags."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from test_nn_llama_training import build_llama, right_padded_batch
from torch import nn

from toolbox.nn.adapters import AdapterDisabledReference, LoRA
from toolbox.nn.llama_training import training_forward
from toolbox.nn.lora_linear import fused_linear, is_plain_lora, linear
from toolbox.objectives.logprobs import completion_logps

torch.set_num_threads(1)


class Projections(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = nn.Linear(32, 16, bias=bias)
        self.k = nn.Linear(32, 8, bias=bias)
        self.v = nn.Linear(32, 8, bias=bias)


def adapted(bias: bool = False, **lora):
    """q, k, v with LoRA (k with another rank and alpha, so the scalings differ), random B."""
    settings = {"r": 4, "lora_alpha": 8, "target_modules": ["q", "k", "v"], **lora}
    model = get_peft_model(Projections(bias), LoraConfig(**settings))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return model.base_model.model


def _grads(module: nn.Module, x: torch.Tensor, out: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    for p in module.parameters():
        p.grad = None
    x.grad = None
    out.backward(g)
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    return {**grads, "x": x.grad.clone()}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("patterns", [{}, {"rank_pattern": {"k": 2}, "alpha_pattern": {"k": 3}}])
def test_linear_and_fused_equal_the_modules(bias, patterns) -> None:
    model = adapted(bias, **patterns)
    modules = (model.q, model.k, model.v)
    assert all(is_plain_lora(m) for m in modules)
    assert len({m.scaling["default"] for m in modules}) == (2 if patterns else 1)
    x = torch.randn(10, 32, requires_grad=True)
    residual = torch.randn(10, 16)
    g = torch.randn(10, 16)
    ref = _grads(model, x, residual + model.q(x), g)
    out = linear(model.q, x, residual)
    torch.testing.assert_close(out, residual + model.q(x), rtol=1e-6, atol=1e-6)
    got = _grads(model, x, out, g)
    assert got.keys() == ref.keys() and any("lora_A" in n for n in got)
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-6)

    g = torch.randn(10, 32)
    ref = _grads(model, x, torch.cat([m(x) for m in modules], -1), g)
    got = _grads(model, x, fused_linear(modules, x), g)
    assert got.keys() == ref.keys()
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-6)


def test_the_base_alone_disabled_or_by_flag() -> None:
    model = adapted()
    x = torch.randn(10, 32)
    base = model.q.base_layer(x)
    assert not torch.allclose(linear(model.q, x), base)
    assert torch.equal(linear(model.q, x, adapters=False), base)
    with _off(model):
        assert torch.equal(linear(model.q, x), base)
        qkv = torch.cat([model.q(x), model.k(x), model.v(x)], -1)  # one product: equal up to rounding
        torch.testing.assert_close(fused_linear((model.q, model.k, model.v), x), qkv, rtol=1e-6, atol=1e-6)


class _off:
    """Disable the adapters of every LoRA layer of ``model`` for the block (as peft's context does)."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if hasattr(m, "enable_adapters")]

    def __enter__(self) -> None:
        for layer in self.layers:
            layer.enable_adapters(False)

    def __exit__(self, *exc) -> None:
        for layer in self.layers:
            layer.enable_adapters(True)


def test_dropout_or_dora_is_not_plain() -> None:
    assert not is_plain_lora(adapted(lora_dropout=0.1).q)
    assert not is_plain_lora(adapted(use_dora=True).q)
    assert not is_plain_lora(nn.Linear(2, 2))


def _random_lora_llama():
    model = LoRA(r=4).apply(build_llama())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def test_lean_base_alone_equals_the_disabled_model_and_toggles_nothing() -> None:
    model = _random_lora_llama()
    fast = training_forward(model)
    assert fast.fused  # every projection plain LoRA: computed from its tensors
    batch = right_padded_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    keep = batch["completion_mask"].bool()
    base = fast.without_adapters()
    assert base is fast.without_adapters() and base.covers(ids, mask)
    model.train()
    flags = [p.requires_grad for p in model.parameters()]
    with torch.no_grad():
        alone = base(ids, attention_mask=mask, logits_mask=keep).logits
        with model.disable_adapter():  # the same lean ops with peft's flags off: bitwise
            assert torch.equal(alone, fast(ids, attention_mask=mask, logits_mask=keep).logits)
            torch.testing.assert_close(alone, model(ids).logits[keep], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(alone, fast(ids, attention_mask=mask, logits_mask=keep).logits)
    assert model.training and [p.requires_grad for p in model.parameters()] == flags
    # the preference reference takes this path, and gives what disabling the adapters gives
    reference = AdapterDisabledReference(model, forward=fast)
    assert reference.lean_base(ids, mask) is base
    lean, _ = completion_logps(reference, batch)
    plain, _ = completion_logps(AdapterDisabledReference(model), batch)
    torch.testing.assert_close(lean, plain, rtol=1e-5, atol=1e-5)
    left = torch.ones_like(mask)
    left[0, :2] = 0  # left padding: not covered, so no lean base (the caller disables the adapters)
    assert reference.lean_base(ids, left) is None
    with pytest.raises(RuntimeError, match="covers"):
        base(ids, attention_mask=left)


def test_dora_has_no_lean_base() -> None:
    model = LoRA(r=4, use_dora=True).apply(build_llama())
    fast = training_forward(model)
    assert not fast.fused and fast.without_adapters() is None
    batch = right_padded_batch()
    assert AdapterDisabledReference(model, forward=fast).lean_base(batch["input_ids"]) is None
