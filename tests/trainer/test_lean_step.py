"""The lean clip, fused AdamW step and zero_grads (toolbox/trainer/lean_step.py) are torch's, and stand
aside (None / False) for what they do not cover."""

from __future__ import annotations

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from toolbox.trainer.lean_step import clip_grad_norm, fused_adamw_step, zero_grads
from toolbox.trainer.optim import adamw


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))


def _backward(model: torch.nn.Module, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, 11, (4, 5), generator=g)
    (model(ids) * torch.randn(4, 5, 16, generator=g)).sum().mul(3.0).backward()


def _train(lean: bool, steps: int = 6, **optim) -> tuple[torch.nn.Module, torch.optim.Optimizer, list, int]:
    model = _model()
    opt = adamw(model, **optim)
    norms, leaned = [], 0
    for step in range(steps):
        _backward(model, step)
        params = [p for p in model.parameters()]
        norm = clip_grad_norm(params, 0.5) if lean else None
        norms.append(torch.nn.utils.clip_grad_norm_(params, 0.5) if norm is None else norm)
        if lean and fused_adamw_step(opt):
            leaned += 1
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, norms, leaned


@pytest.mark.parametrize("optim", [{}, {"weight_decay": 0.1, "lr": 3e-2, "betas": (0.8, 0.95), "eps": 1e-6}])
def test_lean_steps_are_bitwise_torch(optim):
    ref_model, ref_opt, ref_norms, _ = _train(False, **optim)
    model, opt, norms, leaned = _train(True, **optim)
    assert leaned == 5  # the first step is torch's: it creates the state
    assert [n.item() for n in norms] == [n.item() for n in ref_norms]
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.equal(p, q)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][key], ref_opt.state[q][key])


def test_clip_scales_only_above_max_norm():
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert clip_grad_norm([p], 10.0).item() == 5.0
    assert p.grad.tolist() == [3.0, 4.0, 0.0, 0.0]  # under the max: times a clamped 1.0
    assert clip_grad_norm([p], 1.0).item() == 5.0
    assert p.grad.tolist() == pytest.approx([0.6, 0.8, 0.0, 0.0])


def test_clip_stands_aside_without_grads_or_for_mixed_dtypes():
    p = torch.nn.Parameter(torch.zeros(2))
    assert clip_grad_norm([p], 1.0) is None  # no gradient: torch's answer (a zero norm)
    q = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    p.grad, q.grad = torch.ones(2), torch.ones(2, dtype=torch.float64)
    assert clip_grad_norm([p, q], 1.0) is None


def _stepped(opt_factory) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = _model()
    opt = opt_factory(model)
    _backward(model, 0)
    opt.step()  # the state exists
    _backward(model, 1)
    return model, opt


@pytest.mark.parametrize(
    "factory",
    [
        lambda m: adamw(m, fused=False),  # the foreach kernel
        lambda m: torch.optim.AdamW(m.parameters(), fused=True, amsgrad=True),
        lambda m: torch.optim.Adam(m.parameters(), fused=True),  # L2 decay: another kernel
        lambda m: torch.optim.AdamW(m.parameters(), fused=True, lr=torch.tensor(1e-3)),
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
    ],
    ids=["foreach", "amsgrad", "adam", "tensor_lr", "sgd"],
)
def test_fused_adamw_step_stands_aside_for_other_optimizers(factory):
    model, opt = _stepped(factory)
    before = [p.detach().clone() for p in model.parameters()]
    assert fused_adamw_step(opt) is False
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_fused_adamw_step_stands_aside_for_hooks_and_fresh_state():
    model = _model()
    opt = adamw(model)
    _backward(model, 0)
    assert fused_adamw_step(opt) is False  # no state yet: torch's step creates it
    opt.step()
    _backward(model, 1)
    handle = opt.register_step_post_hook(lambda *a: None)
    assert fused_adamw_step(opt) is False
    handle.remove()
    handle = register_optimizer_step_pre_hook(lambda *a: None)  # global
    assert fused_adamw_step(opt) is False
    handle.remove()
    assert fused_adamw_step(opt) is True


def test_zero_grads_sets_every_grad_to_none():
    model = _model()
    opt = adamw(model)
    _backward(model, 0)
    zero_grads(opt)
    assert all(p.grad is None for p in model.parameters())


def test_zero_grads_calls_an_overridden_zero_grad():
    class Counting(torch.optim.SGD):
        calls = 0

        def zero_grad(self, set_to_none: bool = True) -> None:
            Counting.calls += 1
            super().zero_grad(set_to_none)

    model = _model()
    opt = Counting(model.parameters(), lr=0.1)
    _backward(model, 0)
    zero_grads(opt)
    assert Counting.calls == 1 and all(p.grad is None for p in model.parameters())
