"""GPU smoke runs: DDP and FSDP on one CUDA GPU with nccl and bf16, through the torchrun launcher.

For a machine with a GPU (nothing here needs more than one). Each strategy trains a small Llama for
``--steps`` steps with ``precision=bf16`` (FSDP also casts its parameters to bf16 for compute through
its MixedPrecisionPolicy), saves a checkpoint (sharded under FSDP), resumes from it for a few more
steps, and exports a model that ``from_pretrained`` loads and generates with on the GPU. Prints one
JSON object: backend, device, steps/s, losses, resume and export checks per strategy. Exits 1 when
any check fails.

    python benchmarks/gpu_smoke.py [--steps 30] [--nproc 1] [--out results/gpu_smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def smoke(strategy: str, args, root: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from toolbox.core.registries import LAUNCHERS
    from toolbox.experiment import load_config

    run_dir = root / strategy
    shutil.rmtree(run_dir, ignore_errors=True)
    base = [
        "model.hidden_size=256", "model.num_layers=4", "model.num_heads=4", "model.intermediate_size=1024",
        "data.source.num_train=4096", "data.source.num_test=64", "trainer.batch_size=32", "trainer.eval_every=0",
        f"trainer.save_every={args.steps}", "eval=lm", "callbacks=default", "~callbacks.console", "precision=bf16",
        f"device={args.device}", f"strategy={strategy}", "launcher=torchrun", f"launcher.nproc={args.nproc}",
        f"run_dir={run_dir}",
    ]  # fmt: skip
    cfg = load_config([*base, f"trainer.max_steps={args.steps}"])
    start = time.perf_counter()
    first = LAUNCHERS.build(cfg.launcher).run(cfg)
    seconds = time.perf_counter() - start
    resumed_cfg = load_config([*base, f"trainer.max_steps={args.steps + 5}", "resume_from=auto"])
    resumed = LAUNCHERS.build(resumed_cfg.launcher).run(resumed_cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("split") == "train"]
    timed = [r["step_time"] for r in train if 5 < r["step"] <= args.steps]
    device = "cuda" if args.device != "cpu" else "cpu"
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model").to(device)
    ids = model.generate(torch.tensor([[1, 5, 6, 7]], device=device), max_new_tokens=8, do_sample=False,
                         pad_token_id=0)  # fmt: skip
    sharded = (run_dir / "checkpoints" / f"step_{args.steps:08d}" / "sharded").is_dir()
    checks = {
        "backend": first["backend"] == ("nccl" if device == "cuda" else "gloo"),
        "on_device": first["device"].startswith(device),
        "resumed_from_checkpoint": resumed["resumed_from"] == args.steps
        and resumed["step"] == args.steps + 5,
        "loss_decreased": train[-1]["loss"] < train[0]["loss"],
        "export_generates": tuple(ids.shape) == (1, 12),
        "sharded_checkpoint": sharded == (strategy == "fsdp"),
    }
    return {
        "backend": first["backend"],
        "device": first["device"],
        "world_size": first["world_size"],
        "steps_per_s": len(timed) / sum(timed) if timed else None,
        "wall_s_first_run": seconds,
        "first_loss": train[0]["loss"],
        "last_loss": train[-1]["loss"],
        "eval_loss": resumed["metrics"].get("eval/loss"),
        "checks": checks,
        "ok": all(checks.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--nproc", type=int, default=1, help="processes (GPUs) per strategy")
    parser.add_argument("--out", default="results/gpu_smoke")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to dry-run this script (gloo)")
    args = parser.parse_args()
    import torch

    if args.device != "cpu" and not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA GPU visible"}))
        return 0
    gpu = torch.cuda.is_available() and args.device != "cpu"
    out: dict = {"gpu": torch.cuda.get_device_name(0) if gpu else None, "torch": torch.__version__}
    for strategy in ("ddp", "fsdp"):
        try:
            out[strategy] = smoke(strategy, args, Path(args.out))
        except Exception as e:  # report and go on to the other strategy
            out[strategy] = {"ok": False, "error": f"{type(e).__name__}: {e}"[-2000:]}
    out["ok"] = all(out[s].get("ok") for s in ("ddp", "fsdp"))
    print(json.dumps(out, indent=2))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
