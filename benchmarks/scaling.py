"""Data-parallel scaling on this machine: single vs DDP x2 vs FSDP x2 for the same global batch.

Every run trains the same tiny Llama on the same data for the same steps with the same global batch
(``--global-batch``; 2 processes take half each), started through the torchrun launcher with one
thread per process (torchrun's default). Steps/s counts the timed steps after ``--warmup`` from the
trainer's own ``step_time`` (forward, backward, gradient reduction, optimizer step; data loading
included). Scaling efficiency = steps/s of N processes / (N x steps/s of 1 process at 1 thread);
the 1-process run at 2 threads is reported too, as what the same 2 cores give without processes.
Prints one JSON object.

    python benchmarks/scaling.py [--steps 40] [--warmup 5] [--global-batch 32] [--hidden 128]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run(name: str, strategy: str, nproc: int, threads: int, args, root: Path) -> dict:
    from toolbox.core.registries import LAUNCHERS
    from toolbox.experiment import load_config

    run_dir = root / name
    cfg = load_config([
        f"model.hidden_size={args.hidden}", "model.num_layers=2", "model.num_heads=4",
        f"model.intermediate_size={4 * args.hidden}", "data.source.num_train=2048", "data.source.num_test=32",
        f"trainer.batch_size={args.global_batch // nproc}", f"trainer.max_steps={args.steps}",
        "trainer.eval_every=0", "trainer.save_every=0", "eval=lm", "callbacks=none", "+callbacks.jsonl={name:jsonl}",
        "device=cpu", f"strategy={strategy}", "launcher=torchrun", f"launcher.nproc={nproc}",
        f"launcher.omp_num_threads={threads}", f"run_dir={run_dir}",
    ])  # fmt: skip
    result = LAUNCHERS.build(cfg.launcher).run(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = [r["step_time"] for r in rows if r.get("split") == "train" and r["step"] > args.warmup]
    losses = [r["loss"] for r in rows if r.get("split") == "train"]
    return {
        "strategy": strategy,
        "processes": nproc,
        "threads_per_process": threads,
        "world_size": result["world_size"],
        "steps_per_s": len(times) / sum(times),
        "examples_per_s": args.global_batch * len(times) / sum(times),
        "final_train_loss_rank0": losses[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        single = run("single_1t", "single", 1, 1, args, root)
        single2 = run("single_2t", "single", 1, 2, args, root)
        ddp = run("ddp2", "ddp", 2, 1, args, root)
        fsdp = run("fsdp2", "fsdp", 2, 1, args, root)
    base = single["steps_per_s"]
    out = {
        "benchmark": "data-parallel scaling on CPU (gloo), same global batch",
        "cpu_count": os.cpu_count(),
        "global_batch": args.global_batch,
        "steps_timed": args.steps - args.warmup,
        "model": {"hidden_size": args.hidden, "num_layers": 2},
        "runs": {"single": single, "single_2_threads": single2, "ddp_x2": ddp, "fsdp_x2": fsdp},
        "speedup_vs_single": {k: r["steps_per_s"] / base for k, r in (("ddp_x2", ddp), ("fsdp_x2", fsdp),
                                                                      ("single_2_threads", single2))},
        "scaling_efficiency": {"ddp_x2": ddp["steps_per_s"] / (2 * base), "fsdp_x2": fsdp["steps_per_s"] / (2 * base)},
    }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
