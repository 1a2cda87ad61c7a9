"""DPO step throughput: toolbox's preference trainer vs TRL's DPOTrainer on the same work.

Same tiny Llama (random init, same seed, same weights in both), same char tokenizer, the same
arithmetic preference pairs (right vs wrong result), batch size, learning rate, beta, sigmoid loss,
a frozen reference model computed on the fly (no precomputation) in both, fp32 on CPU. TRL runs
with the settings of docs/notes for CPU (bf16=False, gradient checkpointing off, report_to none,
no use_cpu). Each trainer's optimizer steps are timed from inside its own loop, after a few
warm-up steps; the median step time counts (the machine is shared). Prints one JSON object.

    python benchmarks/dpo_vs_trl.py [--steps 60] [--batch-size 16] [--warmup 5] [--precompute]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=256"]


class StepClock:
    """Per-step wall times after the warm-up."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.last: float | None = None
        self.times: list[float] = []

    def step_done(self) -> None:
        now = time.perf_counter()
        self.steps += 1
        if self.last is not None and self.steps > self.warmup:
            self.times.append(now - self.last)
        self.last = now

    def summary(self) -> dict[str, float]:
        med = statistics.median(self.times)
        return {
            "sec_per_step_median": round(med, 5),
            "sec_per_step_mean": round(statistics.mean(self.times), 5),
            "steps_per_s": round(1.0 / med, 2),
            "steps_timed": len(self.times),
        }


def build(args):
    from toolbox.experiment import ExperimentBuilder, load_config

    overrides = [
        *MODEL,
        "data=arithmetic_pairs",
        "trainer=preference",
        "objective=dpo",
        f"objective.beta={args.beta}",
        f"trainer.max_steps={args.steps}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        f"trainer.precompute_ref_logprobs={str(args.precompute).lower()}",
        "callbacks=none",
        "eval=none",
        "device=cpu",
        "scheduler=constant",
        f"optimizer.lr={args.lr}",
        "optimizer.weight_decay=0.0",
        f"run_dir={tempfile.mkdtemp()}",
        "trainer.max_grad_norm=1.0",
        "data.source.max_train=2000",
        "data.source.max_test=64",
    ]
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def bench_toolbox(parts, args, clock: StepClock) -> None:
    from toolbox.core.events import Event

    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: clock.step_done())
    parts.trainer.fit()


def bench_trl(parts, initial_state, args, clock: StepClock) -> None:
    import datasets
    from transformers import TrainerCallback
    from trl import DPOConfig, DPOTrainer

    model = copy.deepcopy(parts.model)
    model.load_state_dict(initial_state)
    rows = [
        {"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]} for r in parts.splits.train
    ]

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.step_done()

    config = DPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=args.beta,
        loss_type=["sigmoid"],
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
        max_length=32,
        precompute_ref_log_probs=args.precompute,
    )
    # TRL builds its reference by reloading the policy's hub id; a model built from a config has none,
    # so it gets the same frozen copy of the initial weights that ours makes
    reference = None if args.precompute else copy.deepcopy(model).eval()
    trainer = DPOTrainer(
        model=model,
        ref_model=reference,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=parts.tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()


def main(argv: list[str] | None = None) -> dict:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--precompute", action="store_true", help="both precompute the reference log-probs")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--trl-first", action="store_true", help="time TRL before ours (check for order bias)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    parts = build(args)
    initial_state = copy.deepcopy(parts.model.state_dict())
    examples = parts.train_data
    tokens_per_pair = sum(
        2 * len(e["prompt_ids"]) + len(e["chosen_ids"]) + len(e["rejected_ids"]) for e in examples
    ) / len(examples)
    result = {
        "benchmark": "dpo_vs_trl",
        "steps": args.steps,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "beta": args.beta,
        "precompute_ref_logprobs": args.precompute,
        "pairs": len(examples),
        "tokens_per_pair": round(tokens_per_pair, 2),
        "torch_threads": torch.get_num_threads(),
        "model": "tiny_llama hidden 64, 2 layers, 2 heads, char tokenizer",
        "order": "trl first" if args.trl_first else "toolbox first",
    }
    import trl

    result["trl_version"] = trl.__version__
    load_before = os.getloadavg()[0]
    timings = {}
    runs = [
        ("toolbox", lambda c: bench_toolbox(parts, args, c)),
        ("trl", lambda c: bench_trl(parts, initial_state, args, c)),
    ]
    for name, fn in reversed(runs) if args.trl_first else runs:
        clock = StepClock(args.warmup)
        fn(clock)
        timings[name] = clock.summary()
        timings[name]["tokens_per_s"] = round(
            timings[name]["steps_per_s"] * args.batch_size * tokens_per_pair, 1
        )
    result.update(timings)
    result["ratio_steps_per_s"] = round(timings["toolbox"]["steps_per_s"] / timings["trl"]["steps_per_s"], 2)
    result["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
