"""Estimates before a run: a short, measured calibration of the train stage, and the SLURM request.

::

    toolbox plan --estimate results/demo/
    | run | stage | predicted wall | peak memory | SLURM request | calibration |
    | demo | train | 3.1 min | 610 MB | --time=5 --mem=800M | measured 41 s |

The train stage's own command (``toolbox train --config work/<run>/config/train.yaml --data
work/<run>/data``) runs four times, briefly, into a temporary folder:

- A: ``K1`` steps, no periodic eval or checkpoint;  B: ``K2`` steps, none either;
- C: ``K1`` steps with an eval after every step but the last, no checkpoint;
- D: ``K1`` steps with a checkpoint after every step but the last, no eval.

Startup, the final eval and the export are in all four. So a step costs what the trainer itself
timed for B's steps after the first ``K1`` (the mean ``step_time`` of its ``metrics.jsonl``; a
trainer that logs none: ``s = (B - A) / (K2 - K1)``, which a process start's jitter of a few
seconds swamps where a step takes milliseconds), an eval ``e = (C - A) / (K1 - 1)``, a checkpoint
``c = (D - A) / (K1 - 1)``, the fixed part ``F = A - K1 * s``, and a run of ``N`` steps with an
eval every ``E`` and a checkpoint every ``S`` steps takes
``F + N * s + (N - 1) // E * e + (N - 1) // S * c``. The peak memory is the largest resident set of
the four runs (their process tree, ``wait4``).

Where the run has an eval slice (``work/<run>/config/eval.yaml``) the eval stage's command then
runs once on A's model: its wall time and peak memory are the eval stage's estimate (the eval does
not depend on how long the model trained; an untrained model may generate longer answers, so it
errs on the long side; a run with ``init_from`` also scores its starting model, not counted here).

The SLURM request adds a stated margin: ``--time`` = the predicted wall time x (1 + TIME_MARGIN)
plus JOB_START_S (the job's own start before the command), rounded up to a minute;
``--mem`` = the peak x (1 + MEM_MARGIN), rounded up to 100 MB. The
calibration is cached in ``work/<run>/estimate/train.json`` under a key of the stage's inputs (the
train config's bytes and the data folder's files), so a second ``--estimate`` with the same inputs
measures nothing. The file also holds the SHA-256 of the config slices measured (``slices``) and of the composed
config (``config``): the workflow's train rule asks SLURM for its ``runtime`` and ``mem_mb`` when the
run's ``resources:`` do not set them and those slices are unchanged (workflow/estimated.py), and
``launcher=slurm`` when its ``time_min`` / ``mem_gb`` are unset and its config is the one measured
(toolbox/results/estimated_request.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from toolbox.core.errors import ToolboxError
from toolbox.results.estimated_request import config_digest, estimate_file, slice_digests

K1, K2 = 3, 13
TIME_MARGIN = 0.5  # --time = predicted wall x 1.5 + JOB_START_S
# What a workflow job spends before the stage's command starts (SLURM's step, Snakemake's jobstep
# importing the workflow inside the job; 20-40 s on the loaded 2-core test machine): without it a
# tiny run's 1-minute request was used to the second (the local cluster's test job ran 60 s).
JOB_START_S = 60
MEM_MARGIN = 0.3  # --mem = peak x 1.3
VERSION = 5  # bump when the calibration or the model changes: old cache entries are ignored


@dataclass(frozen=True)
class Calibration:
    """Four measured runs (seconds, peak resident MB) and the per-step model they give."""

    a_s: float
    b_s: float
    c_s: float
    d_s: float
    peak_mb: float
    took_s: float
    eval_s: float | None = None  # the eval stage on A's model (None: the run has no eval slice)
    eval_peak_mb: float | None = None
    b_step_s: float | None = None  # B's mean step_time after the first K1 steps (None: not logged)

    @property
    def step_s(self) -> float:
        if self.b_step_s is not None:
            return self.b_step_s
        return max((self.b_s - self.a_s) / (K2 - K1), 0.0)

    @property
    def eval_event_s(self) -> float:
        return max((self.c_s - self.a_s) / (K1 - 1), 0.0)

    @property
    def save_event_s(self) -> float:
        return max((self.d_s - self.a_s) / (K1 - 1), 0.0)

    @property
    def fixed_s(self) -> float:
        return max(self.a_s - K1 * self.step_s, 0.0)

    def wall_s(self, steps: int, eval_every: int, save_every: int) -> float:
        evals = (steps - 1) // eval_every if eval_every and eval_every > 0 else 0
        saves = (steps - 1) // save_every if save_every and save_every > 0 else 0
        return self.fixed_s + steps * self.step_s + evals * self.eval_event_s + saves * self.save_event_s


@dataclass(frozen=True)
class Estimate:
    run: str
    stage: str
    wall_s: float
    peak_mb: float
    steps: int
    calibration: Calibration
    cached: bool = False

    def slurm(self) -> dict[str, int]:
        """The SLURM request: ``runtime`` in minutes and ``mem_mb``, with the margins above."""
        return {
            "runtime": max(1, math.ceil((self.wall_s * (1 + TIME_MARGIN) + JOB_START_S) / 60)),
            "mem_mb": int(math.ceil(self.peak_mb * (1 + MEM_MARGIN) / 100) * 100),
        }


def inputs_key(config: Path, data: Path) -> str:
    """A hash of the train stage's inputs: its config slice's bytes and every file of the data folder."""
    h = hashlib.sha256(f"v{VERSION} k{K1},{K2}\n".encode())
    h.update(config.read_bytes())
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(data).as_posix()}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _timed(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run ``cmd``; its wall seconds and peak resident MB (the largest of its process tree)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text()[-2000:]
        raise ToolboxError(
            f"estimate: the calibration run failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}"
        )
    return wall, usage.ru_maxrss / 1024  # Linux: KB


def _toolbox() -> list[str]:
    return [sys.executable, "-m", "toolbox.cli"]


def calibrate(config: Path, data: Path, work: Path, eval_config: Path | None = None) -> Calibration:
    """The four short runs of the module docstring, in ``work`` (emptied first), and the eval
    stage's command on A's model when ``eval_config`` is given."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = [*_toolbox(), "train", "--config", str(config), "--data", str(data)]
    quiet = ["trainer.eval_every=0", "trainer.save_every=0"]
    runs = {
        "a": [f"trainer.max_steps={K1}", *quiet],
        "b": [f"trainer.max_steps={K2}", *quiet],
        "c": [f"trainer.max_steps={K1}", "trainer.eval_every=1", "trainer.save_every=0"],
        "d": [f"trainer.max_steps={K1}", "trainer.eval_every=0", "trainer.save_every=1"],
    }
    t0 = time.perf_counter()
    measured = {}
    for name, extra in runs.items():
        measured[name] = _timed([*base, "--out", str(work / name), *extra], work / f"{name}.log")
    evaluated = (None, None)
    if eval_config is not None:
        evaluated = _timed(
            [*_toolbox(), "eval", "--config", str(eval_config), "--data", str(data),
             "--model", str(work / "a" / "model"), "--out", str(work / "eval.json")],
            work / "eval.log",
        )  # fmt: skip
    return Calibration(
        a_s=measured["a"][0], b_s=measured["b"][0], c_s=measured["c"][0], d_s=measured["d"][0],
        peak_mb=max(m[1] for m in measured.values()), took_s=time.perf_counter() - t0,
        eval_s=evaluated[0], eval_peak_mb=evaluated[1], b_step_s=logged_step_s(work / "b" / "metrics.jsonl"),
    )  # fmt: skip


def logged_step_s(metrics: Path) -> float | None:
    """The mean ``step_time`` the trainer logged for its steps after the first ``K1`` (a run's
    first steps carry one-off costs), or None where it logged none."""
    times = []
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if (
            row.get("split") == "train"
            and int(row.get("step") or 0) > K1
            and row.get("step_time") is not None
        ):
            times.append(float(row["step_time"]))
    return sum(times) / len(times) if times else None


def estimate_run(root: Path, run: str) -> list[Estimate]:
    """The run's estimates: its train stage, and its eval stage where the calibration measured one."""
    train = estimate_train(root, run)
    cal = train.calibration
    if cal.eval_s is None or cal.eval_peak_mb is None:
        return [train]
    return [train, Estimate(run, "eval", cal.eval_s, cal.eval_peak_mb, 0, cal, train.cached)]


def estimate_train(root: Path, run: str) -> Estimate:
    """The train stage of ``run`` (its config slice and data must exist): cached or calibrated."""
    import yaml

    config = root / "work" / run / "config" / "train.yaml"
    data = root / "work" / run / "data"
    for path in (config, data):
        if not path.exists():
            raise ToolboxError(f"estimate: {path} does not exist; run `snakemake -c1 {path}` first.")
    trainer = (yaml.safe_load(config.read_text()) or {}).get("trainer") or {}
    steps = int(trainer.get("max_steps") or 0)
    if steps < 1:
        raise ToolboxError(
            f"estimate: {config} has no trainer.max_steps; only step-bounded runs are estimated."
        )
    cache = estimate_path(root, run)
    key = inputs_key(config, data)
    cached = _read_cache(cache, key)
    if cached is not None:
        cal, was_cached = cached, True
    else:
        with tempfile.TemporaryDirectory(prefix=f"estimate-{run}-") as tmp:
            eval_config = root / "work" / run / "config" / "eval.yaml"
            cal = calibrate(
                config.resolve(), data.resolve(), Path(tmp) / "runs",
                eval_config.resolve() if eval_config.is_file() else None,
            )  # fmt: skip
        was_cached = False
    wall = cal.wall_s(steps, int(trainer.get("eval_every") or 0), int(trainer.get("save_every") or 0))
    est = Estimate(run, "train", wall, cal.peak_mb, steps, cal, was_cached)
    # written on a cached estimate too: a record of an older format gains its config fingerprint
    _write_cache(cache, key, est, composed_digest(config, data))
    return est


def estimate_path(root: Path, run: str) -> Path:
    return estimate_file(root / "work" / run)


def _read_cache(path: Path, key: str) -> Calibration | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != key:
        return None
    return Calibration(**data["calibration"])


def _write_cache(path: Path, key: str, est: Estimate, config: str | None) -> None:
    """The record: the calibration under its inputs' key, the request, and what it applies to (the
    config slices' and the composed config's fingerprints, toolbox/results/estimated_request.py)."""
    from toolbox.core.atomic import atomic_write_text

    record = {
        "key": key, "slices": slice_digests(path.parent.parent / "config"), "config": config,
        "run": est.run, "stage": est.stage, "steps": est.steps,
        "wall_s": est.wall_s, "peak_mb": est.peak_mb, "slurm": est.slurm(),
        "margins": {"time": TIME_MARGIN, "job_start_s": JOB_START_S, "mem": MEM_MARGIN},
        "calibration": asdict(est.calibration),
    }  # fmt: skip
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def composed_digest(config: Path, data: Path) -> str:
    """The fingerprint of the config the train stage runs with (``--config`` and ``--data``): the
    one ``launcher=slurm`` compares its own with."""
    from toolbox.experiment import compose_run

    return config_digest(compose_run([], config, data_dir=data))


def markdown(estimates: list[Estimate]) -> str:
    lines = [
        "| run | stage | predicted wall | peak memory | SLURM request | calibration |",
        "|---|---|---|---|---|---|",
    ]
    for e in estimates:
        req = e.slurm()
        how = "cached" if e.cached else f"measured {e.calibration.took_s:.0f} s"
        lines.append(
            f"| {e.run} | {e.stage} | {_duration(e.wall_s)} | {e.peak_mb:.0f} MB | "
            f"--time={req['runtime']} --mem={req['mem_mb']}M | {how} |"
        )
    return "\n".join(lines) + "\n"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
