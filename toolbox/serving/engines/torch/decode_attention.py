"""Decode attention on a CPU as one compiled kernel: each sequence's one query over its cached keys.

At a decode step every sequence of the batch has one query and attends to its own first ``L``
cached positions. SDPA's CPU kernel (flash attention) runs that as two tiny matmuls per (sequence,
head), each paying a call and, once the batch's keys and values outgrow the L3 cache, a wait on
memory. The same attention written as multiply-and-sum reductions and compiled by ``torch.compile``
(inductor's C++ backend) streams through the cache in a few loops over the whole batch, faster for
large batches; for a few sequences the cache stays in the CPU's caches and SDPA is faster (the
timings: ``benchmarks/results/measurement_notes.md``), so the runner uses this kernel for
batches of at least ``MIN_BATCH`` sequences, and only for the shapes compiled at start-up
(``usable``); other steps run SDPA (the same numbers up to float rounding).

``decode_attention`` is the math (plain torch, also the reference in tests); ``compiled()`` is its
compiled form, shared by every engine of the process (``dynamic=True``: one compilation serves every
batch size and length); ``warm_up`` compiles it for a model's head layout before serving, so that
no request waits for the compiler, and reports why it cannot run (no C++ compiler, say), in which
case the runner keeps SDPA.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

#: decode batches of at least this many sequences use the compiled kernel (see the docstring)
MIN_BATCH = 16
#: the longest length the compiled kernel takes (dynamo bounds a dynamic size by 4096: a longer
#: one would be another compilation, seconds long, in the middle of serving)
MAX_LENGTH = 4096

_lock = threading.Lock()
_compiled: Any = None


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """Attention of one query per sequence: ``q`` ``[B, H, 1, D]``, ``k``/``v`` ``[B, Hkv, L, D]``
    (``H`` a multiple of ``Hkv``: grouped-query attention), row ``b`` seeing keys ``0 ..
    positions[b]``; ``scale`` a 0-dim tensor (a tensor, so that a new value is no recompilation).
    Returns ``[B, H, 1, D]``: SDPA's numbers up to float rounding."""
    b, nkv, length, d = k.shape
    g = q.shape[1] // nkv
    scores = (q.reshape(b, nkv, g, 1, d) * k.unsqueeze(2)).sum(-1) * scale  # [B, Hkv, g, L]
    hidden = torch.arange(length, device=k.device).view(1, 1, 1, length) > positions.view(b, 1, 1, 1)
    p = scores.float().masked_fill(hidden, float("-inf")).softmax(dim=-1).to(v.dtype)
    return (p.unsqueeze(-1) * v.unsqueeze(2)).sum(-2).reshape(b, nkv * g, 1, d)


def usable(batch: int, length: int, capacity: int) -> bool:
    """Whether a decode step of ``batch`` sequences over ``length`` positions of a cache holding
    ``capacity`` per sequence runs the compiled kernel as ``warm_up`` compiled it: a batch of at
    least ``MIN_BATCH``, a length up to ``MAX_LENGTH`` and below the capacity (a view that spans the
    whole capacity is contiguous, which the compiled code guards against: another compilation)."""
    return batch >= MIN_BATCH and length <= MAX_LENGTH and length < capacity


def compiled() -> Any:
    """``decode_attention`` compiled by ``torch.compile`` (made once per process)."""
    global _compiled
    with _lock:
        if _compiled is None:
            _compiled = torch.compile(decode_attention, dynamic=True, fullgraph=True)
        return _compiled


def warm_up(
    device: torch.device, dtype: torch.dtype, num_heads: int, num_kv_heads: int, head_dim: int
) -> str | None:
    """Compile the kernel for this head layout now (tensors laid out as the runner's: a query sliced
    from q/k together, keys a view into a longer cache) and check it against the plain math.
    None when it runs; else why not (the runner then keeps SDPA)."""
    if torch._dynamo.config.disable:  # TORCH_COMPILE_DISABLE=1: "compiled" would be the plain math
        return "torch.compile is disabled here (TORCH_COMPILE_DISABLE=1)"
    b, length, capacity = MIN_BATCH, 5, 8
    gen = torch.Generator(device="cpu").manual_seed(0)
    # inference tensors, as the runner's (cache included): the compiled code guards on the kind
    with torch.inference_mode():
        qk = torch.randn(b, num_heads + num_kv_heads, 1, head_dim, generator=gen).to(device, dtype)
        k, v = (
            torch.randn(b + 1, num_kv_heads, capacity, head_dim, generator=gen).to(device, dtype)
            for _ in range(2)
        )
        args = (
            qk[:, :num_heads],
            k[:b, :, :length],
            v[:b, :, :length],
            torch.arange(b, device=device) % length,
            torch.tensor(head_dim**-0.5, device=device, dtype=torch.float32),
        )
    try:
        with torch.inference_mode():
            got = compiled()(*args)
            want = decode_attention(*args)
    except Exception as e:  # no C++ compiler, an unsupported platform, ...: SDPA it is
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    if not torch.allclose(got.float(), want.float(), atol=tol, rtol=tol):
        return f"the compiled kernel differs from the plain math by {(got - want).abs().max().item():.3g}"
    return None
