"""Our GRPO trainer vs TRL's GRPOTrainer: the same tiny model, data and GRPO settings.

    .venv/bin/python benchmarks/grpo_vs_trl.py [--size tiny|85m] [--steps 8] [--warmup 2] [--forward lean]
        [--rounds 3] [--out F]

Both sides build from one config (tiny Llama, char tokenizer, arithmetic prompts, prompt_only data,
objective=grpo with beta 0, one optimizer step per rollout of prompts × generations completions,
temperature 1, no eos expected from a random model so every completion runs to
``max_completion_length``; our side computes log-probs with ``trainer.forward``, ``--forward``, default
lean, TRL with the model's forward). Reported per side: seconds per optimizer step (median over the measured
steps, after ``--warmup``; in wall and CPU time), rollout tokens/s (completion tokens / generation seconds: our engine's
rollout time, TRL's ``_generate_single_turn``), and the ratios ours / TRL, over alternating rounds under the same
process-wide torch settings (benchmarks/harness). One JSON object.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from harness import SIZES, Report, Rounds
from harness.grpo_fit import timed_fit
from harness.report import common_arguments, settings_from


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
        *args.settings.overrides(),
        *SIZES[args.size].model(),
        *SIZES[args.size].tokenizer(),
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
    from toolbox.experiment import ExperimentBuilder, load_config

    ours = [f"trainer.forward={args.forward}"] if trainer == "grpo" else []  # TRL: the model's forward
    parts = ExperimentBuilder.from_config(load_config(_overrides(args, trainer, run_dir) + ours)).build()
    fit = timed_fit(parts.trainer, args.warmup)
    if trainer == "grpo":
        tokens = [m["num_tokens"] for m in fit.metrics]
    else:
        rows = args.prompts * args.generations
        tokens = [float(m.get("completions/mean_length", 0)) * rows for m in fit.metrics]
    return {
        **fit.figures(),
        "rollout_tokens_per_s": sum(tokens) / max(sum(fit.generate), 1e-9),
        "completion_tokens_per_step": sum(tokens) / max(len(tokens), 1),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--length", type=int, default=16)
    p.add_argument(
        "--forward", choices=("lean", "exact", "model"), default="lean", help="our side's trainer.forward"
    )
    common_arguments(p)
    args = p.parse_args(argv)
    args.settings = settings_from(args)
    report = Report("grpo_vs_trl", args, args.settings)
    report.add("size", SIZES[args.size].as_json())
    tmp = tempfile.mkdtemp(prefix="grpo_bench_")
    count = iter(range(10**6))
    sides = {
        "toolbox": lambda: _run(args, "grpo", f"{tmp}/ours{next(count)}"),
        "trl": lambda: _run(args, "trl_grpo", f"{tmp}/trl{next(count)}"),
    }
    rounds = Rounds(sides, args.settings, args.rounds).run()
    ratios = {
        "vs_trl": rounds.ratio("toolbox", "trl", "sec_per_step", higher_is_better=False),
        "vs_trl_cpu": rounds.ratio("toolbox", "trl", "cpu_sec_per_step", higher_is_better=False),
        "rollout_vs_trl": rounds.ratio("toolbox", "trl", "rollout_tokens_per_s"),
    }
    row = {
        "title": f"GRPO, {args.size} model, {args.prompts} prompts x {args.generations} generations x "
        f"{args.length} tokens, beta 0",
        "figure": "steps_per_s",
        "unit": "steps/s",
        "peers": {"trl": "TRL GRPOTrainer"},
        "goal": ">= 2x TRL",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
