"""Model FLOP utilisation: 6 x parameters x real tokens per step (forward and backward of the
matrix multiplications; attention's score products are not counted) over the step time, against the
GEMM peak of this core measured in the same run (a short float32 ``torch.mm`` timing)."""

from __future__ import annotations

import time


def gemm_peak(size: int = 1024, seconds: float = 0.5) -> dict:
    """The best float32 GEMM rate of ``size`` x ``size`` matrices over about ``seconds``, on the
    current torch threads: ``{"flop_per_s", "size", "calls"}``."""
    import torch

    with torch.no_grad():
        a, b = torch.randn(size, size), torch.randn(size, size)
        out = torch.empty(size, size)
        torch.mm(a, b, out=out)  # warm-up
        best, calls, deadline = float("inf"), 0, time.perf_counter() + seconds
        while calls < 3 or time.perf_counter() < deadline:
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - start)
            calls += 1
    return {"flop_per_s": 2 * size**3 / best, "size": size, "calls": calls}


def model_flop_params(model) -> int:
    """Parameters that take part in matrix multiplications: all of them but the input embedding
    (a table lookup), which counts when the output layer shares it."""
    params = {id(p): p.numel() for p in model.parameters()}
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if embed is not None and (out is None or out.weight is not embed.weight):
        params.pop(id(embed.weight), None)
    return sum(params.values())


def mfu(
    flop_params: int, tokens_per_step: float, sec_per_step: float, peak_flop_per_s: float, passes: int = 6
) -> float:
    """``passes`` x params x tokens / step time / peak (6: forward and backward; 2: forward only)."""
    return passes * flop_params * tokens_per_step / sec_per_step / peak_flop_per_s
