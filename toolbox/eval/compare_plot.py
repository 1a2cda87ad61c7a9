"""Overlay several runs: one PNG per metric, each run in its own colour (``toolbox plot A B ...``).

Train curves are lines, evaluations during training are markers, and the run's final evaluation
(its ``eval.json``, the headline metric such as exact match) is a larger marker at the run's last
step, so two runs read against each other as in W&B or TensorBoard.
"""

from __future__ import annotations

from pathlib import Path

from toolbox.core.errors import DataError
from toolbox.eval.plot import _filename, _groups, final_eval, read_metrics

Curve = tuple[str, str, list[tuple[int, float]]]  # (label, split, points)


def _run_groups(run_dir: Path) -> tuple[dict[str, list[Curve]], dict[str, list[Curve]]]:
    """A run's metric groups (as ``toolbox plot`` draws them) and its final evaluation by metric."""
    path = run_dir / "metrics.jsonl"
    train, evals = read_metrics(path) if path.is_file() else ({}, {})
    last = max((s for points in [*train.values(), *evals.values()] for s, _ in points), default=0)
    final = {
        key.removeprefix("eval/"): [(key, "final", pts)] for key, pts in final_eval(run_dir, last).items()
    }
    return _groups(train, evals), final


def compare_runs(run_dirs: list[Path], out: Path) -> list[Path]:
    """Write one PNG per metric group found in any of ``run_dirs`` into ``out``; return the paths."""
    runs = [Path(r) for r in run_dirs]
    missing = [
        str(r) for r in runs if not (r / "metrics.jsonl").is_file() and not (r / "eval.json").is_file()
    ]
    if missing:
        raise DataError(f"nothing to compare in {', '.join(missing)}: no metrics.jsonl or eval.json there.")
    names = _labels(runs)
    per_run = {name: _run_groups(run) for name, run in zip(names, runs, strict=True)}
    groups = sorted({g for groups, final in per_run.values() for g in [*groups, *final]})
    out.mkdir(parents=True, exist_ok=True)

    from matplotlib.figure import Figure

    written = []
    for group in groups:
        fig = Figure(figsize=(7, 3.8), layout="constrained")
        ax = fig.subplots()
        for i, (name, (curves, final)) in enumerate(per_run.items()):
            colour = f"C{i % 10}"
            for label, split, points in [*curves.get(group, []), *final.get(group, [])]:
                steps, values = [s for s, _ in points], [v for _, v in points]
                metric = label.split("/", 1)[-1]
                if split == "final":
                    ax.plot(
                        steps, values, "*", color=colour, markersize=12, label=f"{name}: {metric} (eval.json)"
                    )
                elif split == "eval" or len(points) == 1:
                    ax.plot(steps, values, "o--", color=colour, markersize=4, label=f"{name}: {label}")
                else:
                    ax.plot(steps, values, "-", color=colour, linewidth=1.2, label=f"{name}: {label}")
        ax.set_xlabel("step")
        ax.set_ylabel(group)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        fig.suptitle(f"{group}: {' vs '.join(names)}")
        target = out / f"{_filename(group)}.png"
        fig.savefig(target, dpi=100)
        written.append(target)
    return written


def _labels(runs: list[Path]) -> list[str]:
    """Short names for the legend: the folder names, with parents added until they differ."""
    for depth in range(1, max(len(r.parts) for r in runs) + 1):
        labels = ["/".join(r.parts[-depth:]) for r in runs]
        if len(set(labels)) == len(labels):
            return labels
    return [str(r) for r in runs]
