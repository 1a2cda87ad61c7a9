"""LoRA step throughput and memory: toolbox (peft=lora) vs TRL + peft on the same work.

The same Llama (random init from one seed, 256 wide, 4 layers, char tokenizer), the same LoRA
(r=8, alpha=16, every linear layer but the head), the same data (arithmetic sums for SFT with the
loss on the completion; right-vs-wrong pairs for DPO, the reference being the policy with its
adapters disabled in both), batch size, learning rate, constant schedule, fp32 on CPU. Each run is
its own process (so peak memory is its own); each trainer's optimizer steps are timed from inside
its loop after a warm-up, the median step counts, in wall time and in CPU time of the training
process (``time.process_time``; with one thread it is what the step computed, so it holds up on a
machine that other jobs share, where wall time also counts the waits). Also: our full fine-tuning
of the same model, for peak memory against LoRA. Prints one JSON object, with the 1-minute load
average before and after each run.

    python benchmarks/lora_vs_trl.py [--steps 40] [--warmup 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dpo_vs_trl import StepClock  # noqa: E402

MODEL = ["model.hidden_size=256", "model.num_layers=4", "model.num_heads=4", "model.intermediate_size=768"]
LORA = {"r": 8, "alpha": 16, "target_modules": "all-linear"}
BATCH = {"sft": 16, "dpo": 8}
LR = 1e-4


class CpuStepClock(StepClock):
    """Per-step wall times (as :class:`StepClock`) and CPU times of this process, after the warm-up."""

    def __init__(self, warmup: int) -> None:
        super().__init__(warmup)
        self.last_cpu: float | None = None
        self.cpu_times: list[float] = []

    def step_done(self) -> None:
        now = time.process_time()
        if self.last_cpu is not None and self.steps + 1 > self.warmup:
            self.cpu_times.append(now - self.last_cpu)
        self.last_cpu = now
        super().step_done()

    def summary(self) -> dict[str, float]:
        med = statistics.median(self.cpu_times)
        return {
            **super().summary(),
            "cpu_sec_per_step_median": round(med, 5),
            "cpu_sec_per_step_mean": round(statistics.mean(self.cpu_times), 5),
            "cpu_steps_per_s": round(1.0 / med, 2),
        }


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(task: str, steps: int, lora: bool):
    from toolbox.experiment import ExperimentBuilder, load_config

    overrides = [
        *MODEL,
        f"trainer.max_steps={steps}",
        f"trainer.batch_size={BATCH[task]}",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        "callbacks=none",
        "eval=none",
        "device=cpu",
        "scheduler=constant",
        f"optimizer.lr={LR}",
        "optimizer.weight_decay=0.0",
        "trainer.max_grad_norm=1.0",
        f"run_dir={tempfile.mkdtemp()}",
    ]
    if task == "dpo":
        overrides += [
            "data=arithmetic_pairs",
            "trainer=preference",
            "objective=dpo",
            "data.source.max_train=2000",
        ]
    else:
        overrides += ["data.source.num_train=4000"]
    if lora:
        overrides += ["peft=lora", f"peft.r={LORA['r']}", f"peft.alpha={LORA['alpha']}"]
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def run_ours(task: str, steps: int, warmup: int, lora: bool) -> dict:
    from toolbox.core.events import Event
    from toolbox.nn.adapters import count_parameters

    parts = build(task, steps, lora)
    trainable, total = count_parameters(parts.model)
    clock = CpuStepClock(warmup)
    rss_built = _rss_mb()
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: clock.step_done())
    parts.trainer.fit()
    return {**clock.summary(), "trainable": trainable, "parameters": total, "rss_built_mb": rss_built}


def run_trl(task: str, steps: int, warmup: int) -> dict:
    import datasets
    from peft import LoraConfig, TaskType
    from transformers import TrainerCallback

    from toolbox.nn.adapters import count_parameters

    parts = build(task, steps, lora=False)  # the same base weights, tokenizer and records
    clock = CpuStepClock(warmup)

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.step_done()

    peft_config = LoraConfig(
        task_type=TaskType.CAUSAL_LM, r=LORA["r"], lora_alpha=LORA["alpha"], target_modules="all-linear"
    )
    common = dict(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=BATCH[task],
        max_steps=steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    if task == "sft":
        from trl import SFTConfig, SFTTrainer

        rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in parts.splits.train]
        trainer = SFTTrainer(
            model=parts.model,
            args=SFTConfig(**common, completion_only_loss=True, max_length=64, packing=False),
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=parts.tokenizer,
            peft_config=peft_config,
            callbacks=[Clock()],
        )
    else:
        from trl import DPOConfig, DPOTrainer

        rows = [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in parts.splits.train]
        trainer = DPOTrainer(
            model=parts.model,
            ref_model=None,  # with peft: the policy with its adapters disabled
            args=DPOConfig(**common, beta=0.1, loss_type=["sigmoid"], max_length=32),
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=parts.tokenizer,
            peft_config=peft_config,
            callbacks=[Clock()],
        )
    trainable, total = count_parameters(trainer.model)
    rss_built = _rss_mb()
    trainer.train()
    return {**clock.summary(), "trainable": trainable, "parameters": total, "rss_built_mb": rss_built}


def child(name: str, steps: int, warmup: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    who, task, mode = name.split("-")
    result = run_trl(task, steps, warmup) if who == "trl" else run_ours(task, steps, warmup, mode == "lora")
    result["peak_rss_mb"] = round(_rss_mb(), 1)
    result["rss_built_mb"] = round(result["rss_built_mb"], 1)
    result["training_rss_mb"] = round(result["peak_rss_mb"] - result["rss_built_mb"], 1)
    return result


RUNS = ("ours-sft-lora", "trl-sft-lora", "ours-dpo-lora", "trl-dpo-lora", "ours-sft-full", "ours-dpo-full")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=RUNS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.warmup, args.threads)))
        return {}
    import peft
    import trl

    result: dict = {
        "benchmark": "lora_vs_trl",
        "model": "llama 256 wide, 4 layers, 4 heads, char tokenizer",
        "lora": LORA,
        "batch_size": BATCH,
        "steps": args.steps,
        "warmup": args.warmup,
        "torch_threads": args.threads,
        "trl_version": trl.__version__,
        "peft_version": peft.__version__,
        "load_average_1min_before": round(os.getloadavg()[0], 2),
    }
    for name in RUNS:
        load_before = round(os.getloadavg()[0], 2)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                name,
                f"--steps={args.steps}",
                f"--warmup={args.warmup}",
                f"--threads={args.threads}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result[name] = json.loads(out.stdout.strip().splitlines()[-1])
        result[name]["load_average_1min"] = [load_before, round(os.getloadavg()[0], 2)]
    for task in ("sft", "dpo"):
        ours, theirs = result[f"ours-{task}-lora"], result[f"trl-{task}-lora"]
        # ratios of the median step times (not of the rounded steps/s)
        result[f"{task}_ratio_steps_per_s"] = round(
            theirs["sec_per_step_median"] / ours["sec_per_step_median"], 2
        )
        result[f"{task}_ratio_cpu_steps_per_s"] = round(
            theirs["cpu_sec_per_step_median"] / ours["cpu_sec_per_step_median"], 2
        )
        full = result[f"ours-{task}-full"]
        result[f"{task}_peak_rss_mb_lora_vs_full"] = [ours["peak_rss_mb"], full["peak_rss_mb"]]
        result[f"{task}_training_rss_mb_lora_vs_full"] = [ours["training_rss_mb"], full["training_rss_mb"]]
    result["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
