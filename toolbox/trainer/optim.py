"""Optimizers and learning-rate schedulers, built from config with the model injected."""

from __future__ import annotations

import math

import torch

from toolbox.core.bounds import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat
from toolbox.core.registries import OPTIMIZERS, SCHEDULERS


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: biases, norms and embeddings' 1-D parameters are not decayed."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@OPTIMIZERS.register("adamw")
def adamw(
    model: torch.nn.Module,
    lr: PositiveFloat = 1e-3,
    weight_decay: NonNegativeFloat = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: PositiveFloat = 1e-8,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """AdamW with decoupled weight decay on matrices only.

    Args:
        lr: peak learning rate.
        weight_decay: decoupled weight decay of 2-D (and larger) parameters.
        betas: Adam's moment coefficients.
        eps: Adam's denominator epsilon.
        fused: torch's fused kernel (None: fused for plain CPU/CUDA parameters, else foreach).
    """
    if fused is None:  # the fused kernel where it applies (plain tensors: not FSDP's DTensors)
        fused = all(
            type(p) is torch.nn.Parameter and p.device.type in ("cpu", "cuda") for p in model.parameters()
        )
    foreach = None if fused else True  # torch picks the per-tensor loop on CPU unless asked
    return torch.optim.AdamW(
        _param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps, fused=fused, foreach=foreach
    )


@OPTIMIZERS.register("adam")
def adam(
    model: torch.nn.Module,
    lr: PositiveFloat = 1e-3,
    weight_decay: NonNegativeFloat = 0.0,
    decay_only: list[str] | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: PositiveFloat = 1e-8,
) -> torch.optim.Optimizer:
    """Adam with L2 weight decay added to the gradient (``torch.optim.Adam``), as the GCN and GAT
    papers train.

    Args:
        lr: learning rate.
        weight_decay: L2 penalty coefficient.
        decay_only: names of the modules whose parameters are decayed (a parameter is decayed when
            its name starts with one of them, e.g. ``[convs.0]``: the first layer only, as the GCN
            paper); null decays every parameter.
        betas: Adam's moment coefficients.
        eps: Adam's denominator epsilon.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if decay_only is None:
        groups = [{"params": [p for _, p in named], "weight_decay": weight_decay}]
    else:
        prefixes = tuple(f"{m}." for m in decay_only)
        unmatched = [m for m in decay_only if not any(n.startswith(f"{m}.") for n, _ in named)]
        if unmatched:
            from toolbox.core.errors import ConfigError

            modules = sorted({n.rsplit(".", 1)[0] for n, _ in named})
            raise ConfigError(
                f"optimizer.decay_only: no parameter of the model is under {unmatched[0]!r}; "
                f"its modules with parameters: {', '.join(modules)}."
            )
        groups = [
            {"params": [p for n, p in named if n.startswith(prefixes)], "weight_decay": weight_decay},
            {"params": [p for n, p in named if not n.startswith(prefixes)], "weight_decay": 0.0},
        ]
    return torch.optim.Adam(groups, lr=lr, betas=betas, eps=eps)


@OPTIMIZERS.register("sgd")
def sgd(
    model: torch.nn.Module,
    lr: PositiveFloat = 1e-2,
    momentum: NonNegativeFloat = 0.0,
    weight_decay: NonNegativeFloat = 0.0,
    nesterov: bool = False,
) -> torch.optim.Optimizer:
    """Stochastic gradient descent.

    Args:
        lr: learning rate.
        momentum: momentum factor.
        weight_decay: L2 penalty of 2-D (and larger) parameters.
        nesterov: Nesterov momentum.
    """
    return torch.optim.SGD(_param_groups(model, weight_decay), lr=lr, momentum=momentum, nesterov=nesterov)


def _lambda_scheduler(optimizer: torch.optim.Optimizer, fn) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


@SCHEDULERS.register("constant")
def constant(optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: NonNegativeInt = 0):
    """Constant learning rate after a linear warmup.

    Args:
        warmup_steps: steps of linear warmup from 0.
    """
    return _lambda_scheduler(optimizer, lambda s: min(1.0, (s + 1) / warmup_steps) if warmup_steps else 1.0)


@SCHEDULERS.register("linear")
def linear(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: NonNegativeInt = 0,
    min_lr_ratio: Fraction = 0.0,
):
    """Linear warmup, then linear decay to ``min_lr_ratio`` × peak at the last step.

    Args:
        warmup_steps: steps of linear warmup from 0.
        min_lr_ratio: final learning rate as a fraction of the peak.
    """

    def fn(s: int) -> float:
        if s < warmup_steps:
            return (s + 1) / warmup_steps
        frac = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
        return 1.0 - (1.0 - min_lr_ratio) * frac

    return _lambda_scheduler(optimizer, fn)


@SCHEDULERS.register("cosine")
def cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: NonNegativeInt = 0,
    min_lr_ratio: Fraction = 0.0,
):
    """Linear warmup, then half-cosine decay to ``min_lr_ratio`` × peak at the last step.

    Args:
        warmup_steps: steps of linear warmup from 0.
        min_lr_ratio: final learning rate as a fraction of the peak.
    """

    def fn(s: int) -> float:
        if s < warmup_steps:
            return (s + 1) / warmup_steps
        frac = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac))

    return _lambda_scheduler(optimizer, fn)
