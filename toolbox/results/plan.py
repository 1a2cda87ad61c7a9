"""``toolbox plan``: what a Snakemake run of the workflow will recompute, per stage and run, and why.

``snakemake -n`` alone cannot tell: compose is a checkpoint, so before it has run the dry run lists
every stage after it (train and data included) although, once compose has rewritten only the
slices that changed, Snakemake reruns just the stages whose slice did. ``toolbox plan`` therefore
first brings the composed configs up to date (``snakemake`` on ``work/<run>/config/full.yaml``:
the defaults and compose jobs only, a few seconds; exactly what the real run does first), then
asks Snakemake's dry run, which is now exact, and prints its jobs with Snakemake's reasons (where
the composed configs exist and the dry run lists no compose job, that one dry run is the plan)::

    toolbox plan results/demo/
    | run | stage | reason |
    | demo | eval | Input files updated by another job: work/demo/config/eval.yaml |
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from toolbox.core.errors import ToolboxError

JOB_RE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")


@dataclass(frozen=True)
class Job:
    stage: str
    run: str | None
    reason: str


def _snakemake() -> str:
    found = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    if not Path(found).exists():
        raise ToolboxError("toolbox plan needs snakemake on the PATH (it is in requirements.lock).")
    return found


def parse_dry_run(text: str) -> list[Job]:
    """The jobs of a ``snakemake -n`` output: rule, the run wildcard and the reason."""
    jobs, current = [], None
    for line in text.splitlines():
        m = JOB_RE.match(line.strip()) if not line.startswith(" ") else None
        if m:
            current = {"stage": m.group(1), "run": None, "reason": ""}
            jobs.append(current)
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("reason: "):
            current["reason"] = stripped.removeprefix("reason: ")
        elif stripped.startswith("wildcards: "):
            found = re.search(r"\brun=([^,\s]+)", stripped)
            current["run"] = found.group(1) if found else None
        elif not stripped:
            current = None
    return [Job(**j) for j in jobs if j["stage"] != "all"]


TARGET_RUN_RE = re.compile(r"^(?:results|work)/([^/]+)")
UPSTREAM_KEYS = ("init_from", "data_from_traces")  # a run's entry naming another run it reads


def target_runs(targets: list[str], runs: dict[str, dict]) -> list[str]:
    """The runs whose composed configs ``targets`` need: each ``results/<run>/`` or ``work/<run>/...``
    target's run and the runs it starts from (``init_from``, ``data_from_traces``, transitively).
    No target (Snakemake's default: every run) or one that names no run (``results/tables/...``):
    every run."""
    if not targets:
        return sorted(runs)
    wanted: list[str] = []
    for target in targets:
        found = TARGET_RUN_RE.match(target.removeprefix("./"))
        if not found or found.group(1) not in runs:
            return sorted(runs)
        wanted.append(found.group(1))
    needed: set[str] = set()
    while wanted:
        run = wanted.pop()
        if run in needed or run not in runs:
            continue
        needed.add(run)
        wanted += [str(runs[run][k]) for k in UPSTREAM_KEYS if (runs[run] or {}).get(k)]
    return sorted(needed)


def _env() -> dict[str, str]:
    """The environment of the Snakemake calls: this interpreter's folder first on the PATH, so that
    the rules' ``toolbox`` and ``python`` are this installation's (``.venv/bin/toolbox plan``
    works without activating the environment).

    ``SLURM_CONF`` is the empty file: Snakemake imports every executor plugin, and the SLURM one
    runs ``scontrol show config`` on import, which waits 2 s where SLURM's tools are installed but
    no controller answers. These calls only compose and dry-run, locally, so they need no cluster."""
    path = os.environ.get("PATH", "")
    return {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), path]),
        "SLURM_CONF": os.devnull,
    }


COMPOSING = ("defaults", "compose")  # the jobs that bring the composed configs up to date


def plan(root: Path, targets: list[str], runs: list[str]) -> list[Job]:
    """Bring every run's composed config up to date, then Snakemake's exact dry run of ``targets``.
    Where every composed config exists, the dry run comes first: when it lists no compose job, it is
    exact already (one Snakemake call instead of two)."""
    configs = [f"work/{run}/config/full.yaml" for run in runs]
    if all((root / c).is_file() for c in configs):
        jobs = _dry_run(root, targets)
        if not any(j.stage in COMPOSING for j in jobs):
            return jobs
    composed = subprocess.run(
        [_snakemake(), "-c1", *configs, "--quiet", "all"],
        cwd=root,
        capture_output=True,
        text=True,
        env=_env(),
    )
    if composed.returncode != 0:
        raise ToolboxError(f"toolbox plan: composing the runs failed:\n{_tail(composed)}")
    return _dry_run(root, targets)


def _dry_run(root: Path, targets: list[str]) -> list[Job]:
    dry = subprocess.run([_snakemake(), "-n", *targets], cwd=root, capture_output=True, text=True, env=_env())
    if dry.returncode != 0:
        raise ToolboxError(f"toolbox plan: snakemake -n failed:\n{_tail(dry)}")
    return parse_dry_run(dry.stdout + "\n" + dry.stderr)


def _tail(done: subprocess.CompletedProcess) -> str:
    """The end of what a failed Snakemake call printed (its error goes to either stream)."""
    return (done.stdout + "\n" + done.stderr).strip()[-3000:]


def build_data(root: Path, runs: list[str]) -> None:
    """Build the data stage of ``runs`` (what the real run does first; a calibration trains on it)."""
    if not runs:
        return
    targets = [f"work/{run}/data" for run in runs]
    done = subprocess.run(
        [_snakemake(), "-c1", *targets, "--quiet", "all"],
        cwd=root,
        capture_output=True,
        text=True,
        env=_env(),
    )
    if done.returncode != 0:
        raise ToolboxError(f"toolbox plan --estimate: building the data failed:\n{_tail(done)}")


def markdown(jobs: list[Job]) -> str:
    if not jobs:
        return "Nothing to recompute: every stage is up to date.\n"
    lines = ["| run | stage | reason |", "|---|---|---|"]
    lines += [f"| {j.run or '–'} | {j.stage} | {j.reason} |" for j in jobs]
    return "\n".join(lines) + "\n"
