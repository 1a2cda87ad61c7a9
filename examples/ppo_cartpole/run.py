"""examples/ppo_cartpole: PPO (the ppo_env trainer) on gymnasium environments, over seeds.

    nice -n 5 python examples/ppo_cartpole/run.py --experiment ppo_cartpole --seeds 0 1 2 \\
        --out examples/ppo_cartpole/results/cartpole.json
    nice -n 5 python examples/ppo_cartpole/run.py --experiment ppo_halfcheetah --seeds 0 \\
        --override trainer.bootstrap_truncated=false --out .../halfcheetah_nobootstrap.json

Trains ``toolbox train experiment=<experiment> seed=<s> [overrides]`` once per seed (run dirs under
``--work``), then writes one JSON: per seed the mean episodic return of the last 20 training
episodes at the end (``return_mean``, the number CleanRL's and our done-when targets read), the env
steps, the training minutes (the iterations' summed ``step_time``), the deterministic evaluation episodes (``eval/return_mean``, ``eval/return_std``),
and the curve of return_mean against env steps; over seeds the mean, std, min and max.
``plot.py`` draws the curves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def train_seed(experiment: str, seed: int, overrides: list[str], run_dir: Path) -> dict:
    from toolbox.experiment import ExperimentBuilder, load_config

    start = time.perf_counter()
    cfg = load_config(
        [f"experiment={experiment}", f"seed={seed}", *overrides, f"run_dir={run_dir}", "resume_from=auto"]
    )
    parts = ExperimentBuilder.from_config(cfg).build()
    try:
        final = parts.trainer.fit()
    finally:
        parts.strategy.teardown()
    minutes = (time.perf_counter() - start) / 60
    curve, last, seconds = [], {}, 0.0
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("split") == "train":
                seconds += record.get("step_time", 0.0)
                if "return_mean" in record:
                    curve.append([int(record["global_step"]), float(record["return_mean"])])
                    last = record
    return {
        "seed": seed,
        "env_id": cfg.env.id,
        "env_steps": int(last.get("global_step", 0)),
        "iterations": int(last.get("step", 0)),
        "return_mean_last20": float(last.get("return_mean", float("nan"))),
        "eval": final,
        "train_minutes": seconds / 60,  # the iterations' own time (rollouts + updates), over all resumes
        "minutes_this_call": minutes,
        "curve": curve,
    }


def summary(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="ppo_cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--override", action="append", default=[], help="a Hydra override (repeatable)")
    parser.add_argument("--work", type=Path, default=Path("work/ppo_examples"))
    parser.add_argument("--out", type=Path, required=True, help="the results JSON")
    parser.add_argument(
        "--name", default=None, help="run dirs are WORK/NAME_seedS (default: the --out file's stem)"
    )
    args = parser.parse_args(argv)
    name = args.name or args.out.stem
    runs: list[dict] = []
    for seed in args.seeds:  # a seed already trained resumes from its final checkpoint (seconds)
        runs.append(train_seed(args.experiment, seed, args.override, args.work / f"{name}_seed{seed}"))
        result = write_result(args, runs)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return result


def write_result(args: argparse.Namespace, runs: list[dict]) -> dict:
    """The JSON of the seeds trained so far, rewritten atomically after each seed."""
    result = {
        "experiment": args.experiment,
        "overrides": args.override,
        "command": "python examples/ppo_cartpole/run.py --experiment "
        + args.experiment
        + " --seeds "
        + " ".join(str(r["seed"]) for r in runs)
        + "".join(f" --override {o}" for o in args.override),
        "return_mean_last20": summary([r["return_mean_last20"] for r in runs]),
        "eval_return_mean": summary([r["eval"].get("eval/return_mean", float("nan")) for r in runs]),
        "train_minutes": summary([r["train_minutes"] for r in runs]),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.out)
    return result


if __name__ == "__main__":
    main()
