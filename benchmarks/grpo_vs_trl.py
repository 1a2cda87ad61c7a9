"""Our GRPO trainer vs TRL's GRPOTrainer: the same tiny model, data and GRPO settings.

    .venv/bin/python benchmarks/grpo_vs_trl.py --steps 8 --warmup 2 --out results/bench/grpo_vs_trl.json

Both sides build from one config (tiny Llama, char tokenizer, arithmetic prompts, prompt_only data,
objective=grpo with beta 0, one optimizer step per rollout of prompts × generations completions,
temperature 1, no eos expected from a random model so every completion runs to
``max_completion_length``). Reported per side: seconds per optimizer step (median over the measured
steps, after ``--warmup``), rollout tokens/s (completion tokens / generation seconds: our engine's
rollout time, TRL's ``_generate_single_turn``), and the ratios ours / TRL. One JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def _overrides(args, trainer: str, run_dir: str) -> list[str]:
    return [
        f"trainer={trainer}",
        "objective=grpo",
        "objective.beta=0.0",
        "data.dataset.name=prompt_only",
        "data.dataset.max_length=16",
        "eval=none",
        "callbacks=none",
        "device=cpu",
        f"num_threads={args.threads}",
        f"model.hidden_size={args.hidden}",
        f"model.num_layers={args.layers}",
        "model.num_heads=2",
        f"model.intermediate_size={4 * args.hidden}",
        "data.source.num_train=2000",
        "data.source.num_test=10",
        f"trainer.max_steps={args.warmup + args.steps}",
        f"trainer.prompts_per_step={args.prompts}",
        f"trainer.num_generations={args.generations}",
        f"trainer.max_completion_length={args.length}",
        "trainer.temperature=1.0",
        "scheduler=constant",
        "optimizer.lr=1e-4",
        f"run_dir={run_dir}",
    ]


def _run(args, trainer: str, run_dir: str) -> dict:
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder, load_config

    parts = ExperimentBuilder.from_config(load_config(_overrides(args, trainer, run_dir))).build()
    t = parts.trainer
    stamps: list[float] = [time.perf_counter()]
    gen_time: list[float] = []
    tokens: list[float] = []

    def on_end(d):
        stamps.append(time.perf_counter())
        if trainer == "grpo":
            gen_time.append(d.metrics["rollout_time"])
            tokens.append(d.metrics["num_tokens"])
        else:
            tokens.append(
                float(d.metrics.get("completions/mean_length", 0)) * args.prompts * args.generations
            )

    t.bus.subscribe(Event.STEP_END, on_end)
    if trainer == "trl_grpo":  # time TRL's generation
        build = t._trl_trainer

        def timed_trainer():
            trl = build()
            inner = trl._generate_single_turn

            def gen(*a, **k):
                s = time.perf_counter()
                out = inner(*a, **k)
                gen_time.append(time.perf_counter() - s)
                return out

            trl._generate_single_turn = gen
            stamps[0] = time.perf_counter()
            return trl

        t._trl_trainer = timed_trainer
    else:
        t.setup = (lambda orig: lambda: (orig(), stamps.__setitem__(0, time.perf_counter())))(t.setup)
    t.fit()
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][args.warmup :]
    gens = gen_time[args.warmup :]
    toks = tokens[args.warmup :]
    return {
        "sec_per_step": statistics.median(steps),
        "sec_per_step_mean": sum(steps) / len(steps),
        "rollout_tokens_per_s": sum(toks) / max(sum(gens), 1e-9),
        "rollout_sec_per_step": sum(gens) / max(len(gens), 1),
        "completion_tokens_per_step": sum(toks) / max(len(toks), 1),
        "measured_steps": len(steps),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="results/bench/grpo_vs_trl.json")
    args = p.parse_args(argv)
    import tempfile

    import torch

    torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="grpo_bench_")
    ours = _run(args, "grpo", f"{tmp}/ours")
    trl = _run(args, "trl_grpo", f"{tmp}/trl")
    result = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": f"{os.cpu_count()} cores, shared with other jobs (load {os.getloadavg()[0]:.1f})",
        "ours": ours,
        "trl": trl,
        "steps_per_s_ratio": trl["sec_per_step"] / ours["sec_per_step"],
        "rollout_tokens_per_s_ratio": ours["rollout_tokens_per_s"] / max(trl["rollout_tokens_per_s"], 1e-9),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
