"""A recipe's perturbation matrix: the same recipe over seeds, both ``trainer.forward`` and 1 and 2
torch threads (each perturbs float rounding the way another CPU does), every run scored by
``toolbox eval`` and checked against the recipe's declared expectation.

A recipe is one or more stages trained in order, each starting from the previous stage's model
(SFT, then GRPO or DPO); the last is evaluated, with ``--before`` the model it started from::

    toolbox matrix --name demo --stage "experiment=demo" --seeds 0-4 --out work/matrix/demo
    toolbox matrix --name grpo_run --stage "experiment=sft_arith ..." --stage "experiment=grpo_arith" ...
    toolbox report --matrix work/matrix/demo --into examples/sft_arith/README.md --block demo-matrix

Each point is a folder ``<out>/s<seed>-<forward>-t<threads>/`` with one run folder per stage,
``eval.json`` and ``run.json`` (its settings, minutes, the machine's load average and the
expectation); a point whose eval.json exists is not run again, so an interrupted matrix resumes.
``trainer.forward`` applies to the supervised stages (the others have no such choice).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbox.core.atomic import atomic_write_text
from toolbox.core.errors import ConfigError, ToolboxError


@dataclass(frozen=True)
class Point:
    seed: int
    forward: str
    threads: int

    @property
    def label(self) -> str:
        return f"s{self.seed}-{self.forward}-t{self.threads}"


def parse_seeds(text: str) -> list[int]:
    """``0-4`` or ``0,2,3`` -> a list of seeds."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise ConfigError(f"--seeds: {text!r}; write a range 0-4 or a list 0,1,2.") from None


def _toolbox() -> list[str]:
    return [sys.executable, "-m", "toolbox.cli"]


def _run(cmd: list[str], log: Path) -> float:
    """Run ``cmd`` with its output appended to ``log``; return the CPU seconds it used (user +
    system, its own rusage): on a shared machine, a better measure of its cost than wall time."""
    with open(log, "a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise ToolboxError(f"{shlex.join(cmd)} exited {proc.returncode}; see {log}")
    return usage.ru_utime + usage.ru_stime


def run_point(point: Point, stages: list[list[str]], out: Path, nice: int) -> dict[str, Any]:
    """Train the stages of one point in order, evaluate the last; return its metrics."""
    folder = out / point.label
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    prefix = ["nice", "-n", str(nice)] if nice else []
    start = time.perf_counter()
    load = os.getloadavg()[0]
    previous: Path | None = None
    minutes, cpu = [], []
    for i, overrides in enumerate(stages):
        run_dir = folder / f"stage{i}"
        init = (
            [
                "model=pretrained",
                f"model.path={previous}",
                "tokenizer=pretrained",
                f"tokenizer.path={previous}",
            ]
            if previous
            else []
        )
        forward = [f"trainer.forward={point.forward}"] if not previous else []
        t, used = time.perf_counter(), 0.0
        if not (run_dir / "model" / "config.json").is_file():
            used = _run(
                [
                    *prefix,
                    *_toolbox(),
                    "train",
                    *overrides,
                    *init,
                    f"seed={point.seed}",
                    f"num_threads={point.threads}",
                    *forward,
                    f"run_dir={run_dir}",
                    "resume_from=auto",
                ],
                log,
            )
        minutes.append(round((time.perf_counter() - t) / 60, 2))
        cpu.append(round(used / 60, 2))
        last, previous = run_dir, run_dir / "model"
    before = ["--before", str(folder / f"stage{len(stages) - 2}" / "model")] if len(stages) > 1 else []
    _run([*prefix, *_toolbox(), "eval", "--run", str(last), *before, "--out", str(folder / "eval.json")], log)
    return {
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "train_minutes": minutes,
        "train_cpu_minutes": cpu,
        "load_start": round(load, 2),
        "load_end": round(os.getloadavg()[0], 2),
    }


def run_matrix(
    name: str,
    stages: list[list[str]],
    out: Path,
    seeds: list[int],
    forwards: list[str],
    threads: list[int],
    jobs: int = 2,
    nice: int = 5,
    expect: dict[str, Any] | None = None,
    command: str | None = None,
) -> list[Path]:
    """Run every point (``jobs`` at a time) that has no eval.json yet; return the points' folders."""
    if not stages:
        raise ConfigError("toolbox matrix: give at least one --stage with the recipe's overrides.")
    bad = [f for f in forwards if f not in ("lean", "exact", "model")]
    if bad:
        raise ConfigError(f"--forwards: {bad}; choose among lean, exact, model.")
    points = [Point(s, f, t) for s, f, t in itertools.product(seeds, forwards, threads)]
    todo = [p for p in points if not (out / p.label / "eval.json").is_file()]

    def one(point: Point) -> None:
        info = run_point(point, stages, out, nice)
        record = {
            "name": name,
            "seed": point.seed,
            "forward": point.forward,
            "threads": point.threads,
            **info,
            "expect": expect or {},
            "command": command,
        }
        atomic_write_text(out / point.label / "run.json", json.dumps(record, indent=2) + "\n")
        metrics = json.loads((out / point.label / "eval.json").read_text())
        shown = {k: v for k, v in metrics.items() if "exact_match" in k or k == "eval/accuracy"}
        print(f"{point.label}: {shown} ({info['minutes']} min, load {info['load_start']})", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, p) for p in todo]:
            future.result()
    return [out / p.label for p in points]
