"""Plot a run's ``metrics.jsonl`` as PNG curves, one figure per group of metrics."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

from toolbox.core.errors import DataError

Series = dict[str, list[tuple[int, float]]]  # "split:key" -> [(step, value)]

_THROUGHPUT = ("tokens_per_s", "steps_per_s")
_SKIP = {"num_tokens"}  # bookkeeping, not a curve


def read_metrics(path: Path) -> tuple[Series, Series]:
    """Train and eval series from a metrics.jsonl; for a step logged twice the last value wins."""
    train: dict[str, dict[int, float]] = defaultdict(dict)
    evals: dict[str, dict[int, float]] = defaultdict(dict)
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
                step = int(record["step"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash
            target = evals if record.get("split") == "eval" else train
            for key, value in record.items():
                if key in ("step", "split") or key in _SKIP:
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                if math.isfinite(value):
                    target[key][step] = float(value)
    return (
        {k: sorted(v.items()) for k, v in train.items()},
        {k: sorted(v.items()) for k, v in evals.items()},
    )


def final_eval(run_dir: Path, last_step: int) -> Series:
    """The run's eval.json as single points at its last step: ``eval/<metric>`` -> [(step, value)]."""
    path = run_dir / "eval.json"
    if not path.is_file():
        return {}
    try:
        metrics = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return {
        key if key.startswith("eval/") else f"eval/{key}": [(last_step, float(value))]
        for key, value in metrics.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and "/" not in key.removeprefix("eval/")
    }


def _groups(train: Series, evals: Series) -> dict[str, list[tuple[str, str, list[tuple[int, float]]]]]:
    """figure name -> [(label, split, points)]; train and eval of the same metric share a figure."""
    groups: dict[str, list[tuple[str, str, list[tuple[int, float]]]]] = {}

    def add(group: str, label: str, split: str, points: list[tuple[int, float]]) -> None:
        groups.setdefault(group, []).append((label, split, points))

    eval_left = dict(evals)
    for key, points in train.items():
        base = key.removeprefix("train/")
        if key in _THROUGHPUT:
            add("throughput", key, "train", points)
        elif key.startswith("memory/"):
            add("memory", key, "train", points)
        else:
            add(base, key, "train", points)
            partner = f"eval/{base}"
            if partner in eval_left:
                add(base, partner, "eval", eval_left.pop(partner))
    for key, points in eval_left.items():
        add(key, key, "eval", points)
    return groups


def _filename(group: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", group).strip("_") or "metric"


def plot_metrics(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Write one PNG per metric group of ``run_dir/metrics.jsonl``; return the paths.

    Groups: the train loss with the eval loss (and any train metric with its ``eval/`` twin),
    the learning rate, throughput (tokens/s, steps/s; one panel each), memory, each other eval
    metric, and each other train metric; the run's eval.json (its headline metrics) adds a last point
    to each metric's eval curve. Files go to ``out`` (default ``run_dir/plots``).
    """
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl" if run_dir.is_dir() or not run_dir.suffix else run_dir
    if not path.is_file() or path.stat().st_size == 0:
        raise DataError(
            f"no metrics to plot: {path} is missing or empty. Train with the jsonl callback "
            "(callbacks: [{name: jsonl}]) so the run writes metrics.jsonl, then plot its run directory."
        )
    train, evals = read_metrics(path)
    last = max((s for points in [*train.values(), *evals.values()] for s, _ in points), default=0)
    for key, points in final_eval(path.parent, last).items():  # the headline metric, e.g. exact match
        evals[key] = [*[p for p in evals.get(key, []) if p[0] != last], *points]
    groups = _groups(train, evals)
    if not groups:
        raise DataError(f"no metrics to plot: {path} has no numeric metrics.")
    out = Path(out) if out is not None else path.parent / "plots"
    out.mkdir(parents=True, exist_ok=True)

    from matplotlib.figure import Figure  # no pyplot: no global backend, Agg renders the PNG

    written = []
    for group, curves in groups.items():
        panels = [[c] for c in curves] if group == "throughput" else [curves]
        fig = Figure(figsize=(7, 2.6 * len(panels) + 1.2), layout="constrained")
        axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
        for ax, panel in zip(axes, panels, strict=True):
            for label, split, points in panel:
                steps = [s for s, _ in points]
                values = [v for _, v in points]
                if split == "eval" or len(points) == 1:
                    ax.plot(steps, values, "o-", label=label, linewidth=1.8, markersize=4)
                else:
                    ax.plot(steps, values, "-", label=label, linewidth=1.2)
            ax.set_xlabel("step")
            ax.set_ylabel(panel[0][0] if len(panel) == 1 else group)
            ax.grid(True, alpha=0.3)
            if _spread(panel) > 100:  # positive values over orders of magnitude
                ax.set_yscale("log")
            ax.legend(loc="best", fontsize="small")
        fig.suptitle(f"{path.parent.name}: {group}")
        target = out / f"{_filename(group)}.png"
        fig.savefig(target, dpi=100)
        written.append(target)
    return written


def _spread(panel: list[tuple[str, str, list[tuple[int, float]]]]) -> float:
    values = [v for _, _, pts in panel for _, v in pts]
    return max(values) / min(values) if values and min(values) > 0 else 1.0
