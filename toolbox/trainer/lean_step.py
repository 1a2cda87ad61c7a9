"""The optimizer step's library calls without their Python plumbing, bit for bit.

On a tiny model the kernels of a step are a few microseconds each, and what torch wraps them in
costs as much: ``torch.nn.utils.clip_grad_norm_`` groups the gradients by device and dtype through
three no-grad wrappers, and ``torch.optim.AdamW.step`` passes the profiler hook, the scheduler's
counting wrapper, a per-group ``_init_group`` with its checks and the device grouping again before
it reaches the one fused kernel. Measured on the tiny SFT benchmark (CPU, one thread), the two
took 0.27 and 0.38 ms of a ~6.5 ms step; the calls below take 0.18 and 0.19 ms. ``zero_grad``
(set_to_none) passes a dynamo-disable wrapper and a profiler range to set ~20 attributes: 0.06 ms.

Each function issues exactly the kernels torch issues, with the same arguments, in the same order,
so gradients, weights and optimizer state are bitwise torch's. Each covers only the common case
and says when it does not apply (it returns ``None``/``False``); the caller then calls torch:

- :func:`clip_grad_norm` — plain tensors (no DTensor or other subclass) on one device and dtype,
  on a CPU or CUDA device (where torch takes its ``foreach`` path too);
- :func:`fused_adamw_step` — a ``torch.optim.AdamW`` (the class itself) built with
  ``fused=True`` (the toolbox default on CPU and CUDA), no amsgrad/maximize/capturable/
  differentiable, float hyperparameters (no tensor lr or betas), no step hooks, no GradScaler
  state on the optimizer, every parameter's state already created (torch's own first step
  creates it) and every tensor on one device and dtype;
- :func:`zero_grads` — an optimizer whose ``zero_grad`` is torch's own (not overridden).
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as torch_optimizer

_FOREACH_DEVICES = ("cpu", "cuda")


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor | None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` (2-norm), or ``None`` when the
    gradients are not all plain tensors on one CPU/CUDA device and dtype (call torch then)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    first = grads[0]
    device, dtype = first.device, first.dtype
    if device.type not in _FOREACH_DEVICES or any(
        type(g) is not torch.Tensor or g.device != device or g.dtype != dtype for g in grads
    ):
        return None
    with torch.no_grad():  # torch's ops, in its order (clip_grad.py: _get_total_norm, _clip_grads_with_norm_)
        total_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        clip_coef = float(max_norm) / (total_norm + 1e-6)
        torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))
    return total_norm


def fused_adamw_step(optimizer: torch.optim.Optimizer) -> bool:
    """Step a fused ``torch.optim.AdamW`` as its ``step()`` would; False (nothing done) when the
    optimizer is not of the covered kind (see the module docstring): call ``optimizer.step()``."""
    if (
        type(optimizer) is not torch.optim.AdamW
        or _has_step_hooks(optimizer)
        or getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
    ):
        return False
    state = optimizer.state
    work = []
    device = dtype = None
    for group in optimizer.param_groups:
        if (
            not group["fused"]
            or group["amsgrad"]
            or group["maximize"]
            or group["capturable"]
            or group["differentiable"]
            or not group["decoupled_weight_decay"]
            or any(isinstance(group[k], torch.Tensor) for k in ("lr", "weight_decay", "eps"))
            or any(isinstance(b, torch.Tensor) for b in group["betas"])
        ):
            return False
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            s = state.get(p)
            if not s:  # torch's step creates the state (and checks the device and dtype)
                return False
            if device is None:
                device, dtype = p.device, p.dtype
            if type(p) is not torch.nn.Parameter or p.device != device or p.dtype != dtype:
                return False
            if type(grad) is not torch.Tensor or grad.dtype != dtype or grad.is_sparse:
                return False
            params.append(p)
            grads.append(grad)
            exp_avgs.append(s["exp_avg"])
            exp_avg_sqs.append(s["exp_avg_sq"])
            steps.append(s["step"])
        work.append((group, params, grads, exp_avgs, exp_avg_sqs, steps))
    with torch.no_grad():  # torch/optim/adam.py: _fused_adam, once per group with parameters
        for group, params, grads, exp_avgs, exp_avg_sqs, steps in work:
            if not params:
                continue
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adamw_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
    return True


def _has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether step hooks are registered on ``optimizer`` or globally (or torch keeps them elsewhere
    than this module knows: then the hooks cannot be ruled out, and torch's step runs them)."""
    hooks = [
        getattr(optimizer, "_optimizer_step_pre_hooks", None),
        getattr(optimizer, "_optimizer_step_post_hooks", None),
        getattr(torch_optimizer, "_global_optimizer_pre_hooks", None),
        getattr(torch_optimizer, "_global_optimizer_post_hooks", None),
    ]
    return any(h is None or len(h) > 0 for h in hooks)


def zero_grads(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``: every optimized parameter's ``grad`` to None
    (directly where ``zero_grad`` is torch's own, else through the optimizer's)."""
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad:
        optimizer.zero_grad(set_to_none=True)
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
