"""Publish a run's deliverables into ``results/<run>/`` (the workflow's last stage).

    python workflow/scripts/publish.py --config work/demo/config/full.yaml \
        --model work/demo/train/model --eval work/demo/eval.json --check work/demo/check.json \
        --metrics work/demo/train/metrics.jsonl --plots work/demo/plots --out results/demo

``results/<run>/`` then holds::

    config.yaml      the run's composed config (copy)
    model/           the trained model: one relative symlink per file (no copy of the weights)
    eval.json        the eval stage's metrics (copy; before/after for a run with init_from)
    check.json       the check stage's table: the run's expect: against eval.json (copy)
    metrics.jsonl    the training curves (copy)
    curves/          train.json and eval.json: metrics.jsonl split by split, as JSON lists
                     (``dvc plots`` reads JSON, CSV and YAML, not JSON lines)
    plots/           the PNG curves of ``toolbox plot`` (copies)
    <extra>          each ``--extra FILE`` (copy; e.g. agent_eval.json of a run with an agent)

The folder is built beside the target and renamed into place, so it exists only when complete.
Only the standard library is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path


def link_tree(src: Path, dst: Path) -> None:
    """``dst`` mirrors ``src``: real folders, one relative symlink per file."""
    dst.mkdir(parents=True)
    for entry in sorted(src.iterdir()):
        if entry.name == ".snakemake_timestamp":  # Snakemake's marker in directory() outputs
            continue
        if entry.is_dir():
            link_tree(entry, dst / entry.name)
        else:
            os.symlink(os.path.relpath(entry.resolve(), dst.resolve()), dst / entry.name)


def split_curves(metrics: Path, out: Path) -> None:
    """metrics.jsonl -> out/train.json, out/eval.json (lists of records, sorted by step)."""
    by_split: dict[str, list[dict]] = {"train": [], "eval": []}
    for line in metrics.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_split.setdefault(record.get("split", "train"), []).append(record)
    out.mkdir(parents=True)
    for split, records in by_split.items():
        records.sort(key=lambda r: r.get("step", 0))
        (out / f"{split}.json").write_text(json.dumps(records, indent=1) + "\n")


def publish(
    config: Path,
    model: Path,
    eval_json: Path,
    check: Path,
    metrics: Path,
    plots: Path,
    out: Path,
    extra: tuple = (),
) -> Path:
    for path in (config, model, eval_json, check, metrics, plots, *extra):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: run the stage that writes it first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    shutil.copyfile(config, tmp / "config.yaml")
    link_tree(model, tmp / "model")
    shutil.copyfile(eval_json, tmp / "eval.json")
    shutil.copyfile(check, tmp / "check.json")
    shutil.copyfile(metrics, tmp / "metrics.jsonl")
    split_curves(metrics, tmp / "curves")
    shutil.copytree(plots, tmp / "plots")
    for path in extra:
        shutil.copyfile(path, tmp / path.name)
    if out.exists() or out.is_symlink():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("config", "model", "eval", "check", "metrics", "plots", "out"):
        parser.add_argument(f"--{name}", required=True, type=Path)
    parser.add_argument("--extra", action="append", default=[], type=Path, help="another file to copy in")
    a = parser.parse_args(argv)
    try:
        out = publish(a.config, a.model, a.eval, a.check, a.metrics, a.plots, a.out, tuple(a.extra))
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in sorted(out.iterdir()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
