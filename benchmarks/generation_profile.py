"""Where a decode step's time goes: our torch engine's step split into projections, attention and the
rest, beside transformers ``generate``'s time per token, in CPU seconds.

``generation.py`` times whole generations (wall clock); this script explains its ratios. For each
batch size it prefills the same prompts into the engine's ``SlotRunner`` and times ``--steps``
greedy decode steps (this thread's CPU time, so that other processes on the machine count less)
three ways, alternating, ``--rounds`` times (the median counts):

- ``full``: the step as the engine runs it;
- without projections: every matmul (q/k/v, o, gate/up, down, the head) replaced by a stand-in
  that returns a tensor of the right shape computed once (no weight is read);
- without attention: the attention over the KV cache (SDPA or the compiled decode kernel) replaced
  by a stand-in returning the query (the cache is still written).

``projections_ms`` and ``attention_ms`` are what each stand-in saved, ``rest_ms`` the remainder
(norms, rotary embedding, cache writes, residuals, the activation, Python). HF's time per token is
``generate`` of ``--steps + 1`` tokens minus ``generate`` of 1 (its prefill), over ``--steps``.
``ceiling`` is HF's time per token over ``projections_ms``: the ratio if everything but the
projections took no time. ``projection_gb_s`` is the weight bytes the projections read per step
over their time (at batch 1 they are bound by memory), ``projection_gflop_s`` their arithmetic
rate (at batch 32 they are bound by it).

    python benchmarks/generation_profile.py --size 512
    python benchmarks/generation_profile.py --size 85m --batch-sizes 1 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from generation import SIZES, build_model, size_tokenizer

VARIANTS = ("full", "no_projections", "no_attention")


@contextmanager
def stand_ins(runner: Any, variant: str) -> Iterator[None]:
    """Run ``runner`` with the projections or the attention replaced by stand-ins (see the module
    docstring); everything is restored on leaving."""
    import torch

    import toolbox.serving.engines.torch.runner as runner_module

    linear, fused, functional = runner._linear, runner._fused_decode, runner_module.F
    if variant == "no_projections":
        outputs: dict[tuple, torch.Tensor] = {}

        def fake_linear(x: torch.Tensor, weight: Any, bias: Any) -> torch.Tensor:
            key = (tuple(x.shape), tuple(weight.size()))
            if key not in outputs:
                outputs[key] = linear(x, weight, bias)
            return outputs[key]

        runner._linear = fake_linear
    elif variant == "no_attention":
        runner_module.F = types.SimpleNamespace(
            **{name: getattr(functional, name) for name in dir(functional) if not name.startswith("__")}
        )
        runner_module.F.scaled_dot_product_attention = lambda q, *args, **kwargs: q
        if fused is not None:
            runner._fused_decode = lambda q, *args: q
    try:
        yield
    finally:
        runner._linear, runner._fused_decode, runner_module.F = linear, fused, functional


def decode_cpu_ms(runner: Any, batch: int, prompt_len: int, steps: int, seed: int) -> float:
    """CPU milliseconds per greedy decode step of ``batch`` sequences after a ``prompt_len`` prefill."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    vocab = runner.model.config.vocab_size
    prompts = torch.randint(4, vocab, (batch, prompt_len), generator=generator).tolist()
    tokens = runner.prefill(list(range(batch)), prompts).argmax(-1)
    start = time.thread_time()
    for position in range(prompt_len, prompt_len + steps):
        positions = torch.full((batch,), position, dtype=torch.long)
        tokens = runner.decode(tokens, positions, position, position).argmax(-1)
    return (time.thread_time() - start) * 1e3 / steps


def hf_cpu_ms(model: Any, batch: int, prompt_len: int, steps: int, seed: int, pad: int) -> float:
    """HF ``generate``'s CPU milliseconds per token after the first (its prefill subtracted)."""
    import torch
    from transformers import GenerationConfig

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, model.config.vocab_size, (batch, prompt_len), generator=generator)

    def run(new: int) -> float:
        config = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=pad)
        start = time.thread_time()
        model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        return time.thread_time() - start

    return (run(steps + 1) - run(1)) * 1e3 / steps


def projection_elements(model: Any) -> int:
    """Weight elements the projections of one decode step read (the layers' linears and the head);
    also the multiply-adds per sequence."""
    layers = sum(
        m.weight.numel()
        for name, m in model.named_modules()
        if type(m).__name__ == "Linear" and "layers." in name
    )
    return layers + model.get_output_embeddings().weight.numel()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="512", help="the model's shape")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--steps", type=int, default=48, help="decode steps timed per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from toolbox.core.registries import ENGINES

    torch.set_num_threads(args.threads)
    tokenizer = size_tokenizer(args.size)
    model = build_model(len(tokenizer), seed=args.seed, **SIZES[args.size])
    engine = ENGINES.build(
        {
            "name": "torch",
            "max_batch_size": max(args.batch_sizes),
            "max_model_len": args.prompt_len + args.steps + 1,
        },
        model=model,
        tokenizer=tokenizer,
    )
    runner = engine.runner
    elements = projection_elements(model)
    itemsize = next(model.parameters()).element_size()
    results = []
    with torch.inference_mode():
        for batch in args.batch_sizes:
            med = profile_batch(runner, model, batch, args, tokenizer.pad_token_id)
            projections = med["full"] - med["no_projections"]
            attention = med["full"] - med["no_attention"]
            results.append(
                {
                    "batch_size": batch,
                    "step_ms": round(med["full"], 3),
                    "projections_ms": round(projections, 3),
                    "attention_ms": round(attention, 3),
                    "rest_ms": round(med["full"] - projections - attention, 3),
                    "hf_step_ms": round(med["hf"], 3),
                    "ratio": round(med["hf"] / med["full"], 3),
                    "ceiling": round(med["hf"] / projections, 3) if projections > 0 else None,
                    "projection_gb_s": round(elements * itemsize / projections / 1e6, 2)
                    if projections > 0
                    else None,
                    "projection_gflop_s": round(2 * elements * batch / projections / 1e6, 2)
                    if projections > 0
                    else None,
                }
            )
    engine.shutdown()
    report = {
        "benchmark": "decode step profile, torch engine vs HF generate (CPU ms per token)",
        "model": {"size": args.size, **SIZES[args.size], "vocab_size": len(tokenizer)},
        "prompt_len": args.prompt_len,
        "steps": args.steps,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    print(json.dumps(report, indent=2))
    return report


def profile_batch(
    runner: Any, model: Any, batch: int, args: argparse.Namespace, pad: int
) -> dict[str, float]:
    """The median CPU ms per token of each variant and of HF, measured alternately ``args.rounds``
    times after one warm-up of each (compilation, allocations)."""

    def ours(name: str) -> float:
        with stand_ins(runner, name):
            return decode_cpu_ms(runner, batch, args.prompt_len, args.steps, args.seed)

    measure: dict[str, Callable[[], float]] = {name: (lambda name=name: ours(name)) for name in VARIANTS}
    measure["hf"] = lambda: hf_cpu_ms(model, batch, args.prompt_len, args.steps, args.seed, pad)
    times: dict[str, list[float]] = {name: [] for name in measure}
    for fn in measure.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in measure.items():
            times[name].append(fn())
    return {name: statistics.median(values) for name, values in times.items()}


if __name__ == "__main__":
    main()
