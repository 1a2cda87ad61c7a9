"""examples/decision_intent: train a tiny Llama as a 10-way intent decision model, then self-distil it.

    python examples/decision_intent/run.py --out work/decision_intent               # both stages
    python examples/decision_intent/run.py --out work/decision_intent --seeds 0 1 2  # one pair per seed
    python examples/decision_intent/run.py --out work/decision_intent --sft-model DIR  # stage 2 only

Stage 1 (``experiment=decision_intent_sft``) trains the model's raw readout with decision cross
entropy on generated customer messages, the right option listed first in 30 % of them (a planted
position bias). Stage 2 (``experiment=decision_intent``) trains the stage-1 model with
``decision_distill``: its raw readout onto its own L0 distribution (all 10 rotations, the batch
prior divided out) plus permutation consistency, without labels. Both models are evaluated on the
same 400 held-out messages (options in the fixed order, and reversed): accuracy, ECE, flip rate,
coverage at <= 5 % error, for the raw and the L0 readout. Writes ``<out>/results.json``.

    python examples/decision_intent/run.py --table RESULTS.json [...]  # the README's table of runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

METRICS = ("accuracy", "ece", "flip_rate", "coverage_at_5")
# the README table's columns: (readout level, metric, heading)
COLUMNS = (
    ("raw", "accuracy", "raw accuracy"),
    ("raw", "ece", "raw ECE"),
    ("raw", "flip_rate", "raw flip rate"),
    ("raw", "coverage_at_5", "raw coverage at ≤ 5 % error"),
    ("L0", "accuracy", "L0 accuracy"),
    ("L0", "ece", "L0 ECE"),
)


def _train(overrides: list[str], evaluate_first: bool = False) -> tuple[dict, float, dict]:
    from toolbox.experiment import ExperimentBuilder, load_config

    start = time.perf_counter()
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    try:
        before = parts.trainer.evaluate() if evaluate_first else {}
        final = parts.trainer.fit()
    finally:
        parts.strategy.teardown()
    return final, (time.perf_counter() - start) / 60, before


def _pick(metrics: dict) -> dict:
    return {f"{level}_{m}": metrics.get(f"eval/{level}_{m}") for level in ("raw", "L0") for m in METRICS}


def run_seed(out: Path, seed: int, sft_model: str | None, threads: int, extra: dict[str, list[str]]) -> dict:
    quiet = ["~callbacks.console", "device=cpu", f"seed={seed}", f"num_threads={threads}"]
    result: dict = {"seed": seed}
    if sft_model is None:
        overrides = [
            "experiment=decision_intent_sft",
            f"run_dir={out / f'sft_{seed}'}",
            *quiet,
            *extra["sft"],
        ]
        _, minutes, _ = _train(overrides)
        sft_model = str(out / f"sft_{seed}" / "model")
        result["sft"] = {"minutes": round(minutes, 2), "overrides": overrides[1:]}
    overrides = [
        "experiment=decision_intent",
        f"model.path={sft_model}",
        f"tokenizer.path={sft_model}",
        f"run_dir={out / f'distill_{seed}'}",
        *quiet,
        *extra["distill"],
    ]
    final, minutes, before = _train(overrides, evaluate_first=True)
    result["distill"] = {"minutes": round(minutes, 2), "overrides": overrides[1:], "sft_model": sft_model}
    result["before"], result["after"] = _pick(before), _pick(final)
    return result


def _setting(run: dict) -> str:
    """How a run differs from the default: its torch threads and trainer.forward (from its overrides)."""
    values = dict(o.split("=", 1) for o in run["distill"]["overrides"] if "=" in o)
    threads = values.get("num_threads", "1")
    return f"{values.get('trainer.forward', 'lean')}, {threads} thread{'' if threads == '1' else 's'}"


def table(results: list[dict]) -> str:
    """The markdown table of the runs in ``results`` (``results.json`` contents): a row per seed
    and setting, each metric as stage 1 → after stage 2, and a last row with each after-value's
    range over the rows."""
    heads = ["seed", "forward, threads", *(h for _, _, h in COLUMNS), "stage 2 minutes"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    runs = [run for result in results for run in result["runs"]]
    for run in runs:
        cells = [
            f"{run['before'][f'{lv}_{m}']:.3f} → {run['after'][f'{lv}_{m}']:.3f}" for lv, m, _ in COLUMNS
        ]
        lines.append(
            f"| {run['seed']} | {_setting(run)} | "
            + " | ".join(cells)
            + f" | {run['distill']['minutes']:.1f} |"
        )
    spans = []
    for lv, m, _ in COLUMNS:
        after = [run["after"][f"{lv}_{m}"] for run in runs]
        spans.append(f"{min(after):.3f}–{max(after):.3f}")
    lines.append(f"| all {len(runs)} | after stage 2 | " + " | ".join(spans) + " | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="work/decision_intent")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sft-model", default=None, help="skip stage 1: a saved model folder (one seed)")
    parser.add_argument("--sft-override", action="append", default=[])
    parser.add_argument("--distill-override", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--table", nargs="+", metavar="RESULTS", help="print the table of these results.json files"
    )
    args = parser.parse_args(argv)
    if args.table:
        results = [json.loads(Path(p).read_text()) for p in args.table]
        print(table(results), end="")
        return {"table": results}
    out = Path(args.out)
    extra = {"sft": args.sft_override, "distill": args.distill_override}
    runs = [run_seed(out, seed, args.sft_model, args.threads, extra) for seed in args.seeds]
    summary = {}
    for key in runs[0]["before"]:
        b = [r["before"][key] for r in runs]
        a = [r["after"][key] for r in runs]
        summary[key] = {
            "before": [min(b), statistics.median(b), max(b)],
            "after": [min(a), statistics.median(a), max(a)],
        }
    result = {"seeds": args.seeds, "runs": runs, "summary_min_median_max": summary}
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out / "results.json")
    print(json.dumps(summary, indent=2))
    return result


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
