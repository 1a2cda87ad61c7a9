"""The agent loop of config/config.yaml (agent_base -> agent run -> traces -> agent_sft -> eval ->
check) over seeds and ``trainer.forward``, each point a ``snakemake -c2 results/agent_sft/`` of its
own copy of this checkout, collected as a perturbation matrix for ``toolbox report``.

    python examples/agent_tools/seeds.py --seeds 0-2 --forwards lean,exact --out work/agent_matrix
    toolbox report --matrix work/agent_matrix --expect-run agent_sft \\
        --into examples/agent_tools/README.md --block agent-matrix

A point ``s<seed>-<forward>`` copies the files git tracks (and untracked ones it does not ignore)
into ``<out>/<label>/repo``, adds ``seed=<seed>`` and ``trainer.forward=<forward>`` to the
overrides of both runs in its ``config/config.yaml`` (the other seeds of the README are this and
nothing else), and runs the workflow there (``nice``, one torch thread per job as the runs
declare). It writes ``<label>/eval.json`` (``results/agent_sft/agent_eval.json``: ``eval/<metric>``
after training on the traces, ``before/<metric>`` the base, ``gain/<metric>``) and ``run.json``
(seed, forward, wall minutes, the load average at start and end, the base's stopping step, the
dataset's rows, and agent_sft's ``expect:``). A point with an eval.json is not run again; an
interrupted one (its copy there, no eval.json) is resumed in its copy: files that changed in the
checkout are copied again, Snakemake is unlocked and reruns what is incomplete or out of date (a
train job continues from its last checkpoint), and ``minutes`` adds the earlier attempts' wall
time (each Snakemake log's start to its last write) to this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("agent_base", "agent_sft")


CONFIG = "config/config.yaml"


def copy_checkout(dest: Path) -> None:
    """The checkout's files as git sees them (tracked, and untracked ones not ignored), those whose
    content differs from dest's (so an unchanged file keeps its time stamp for Snakemake); the
    config is written by configure."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(lambda n: n and n != CONFIG, files):
        src, out = ROOT / name, dest / name
        if src.is_file() and not (out.is_file() and out.read_bytes() == src.read_bytes()):
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def configure(repo: Path, seed: int, forward: str) -> dict:
    """The checkout's config with the point's overrides added to both runs, written into repo when
    it differs; return agent_sft's expect:."""
    import yaml

    config = yaml.safe_load((ROOT / CONFIG).read_text())
    for run in RUNS:
        entry = config["runs"][run]
        entry["overrides"] = [*(entry.get("overrides") or []), f"seed={seed}", f"trainer.forward={forward}"]
    text, path = yaml.safe_dump(config, sort_keys=False), repo / CONFIG
    if not (path.is_file() and path.read_text() == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return config["runs"]["agent_sft"].get("expect") or {}


def attempt_minutes(repo: Path) -> list[float]:
    """Wall minutes of the Snakemake runs already made in repo: each log's start (its name) to its
    last write; the last run's job may have written on after its log (a killed training), so that
    run ends at the last write under work/ too."""
    logs = sorted((repo / ".snakemake" / "log").glob("*.snakemake.log"))
    minutes = []
    for i, log in enumerate(logs):
        start = datetime.strptime(log.name.split(".snakemake")[0], "%Y-%m-%dT%H%M%S.%f").timestamp()
        end = log.stat().st_mtime
        if i == len(logs) - 1:
            end = max([end, *(f.stat().st_mtime for f in (repo / "work").rglob("*") if f.is_file())])
        minutes.append(round((end - start) / 60, 1))
    return minutes


def run_point(seed: int, forward: str, out: Path) -> None:
    from toolbox.core.atomic import atomic_write_text

    folder = out / f"s{seed}-{forward}"
    if (folder / "eval.json").is_file():
        return
    repo = folder / "repo"
    earlier = attempt_minutes(repo)  # an interrupted point is resumed in its copy
    copy_checkout(repo)
    expect = configure(repo, seed, forward)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_WAIT_POLICY": "PASSIVE"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    if earlier:  # a killed Snakemake leaves its lock
        subprocess.run(["snakemake", "--unlock", "results/agent_sft/"], cwd=repo, env=env, check=True,
                       capture_output=True)  # fmt: skip
    load, start = os.getloadavg()[0], time.perf_counter()
    with open(folder / "snakemake.log", "a" if earlier else "w") as log:
        command = ["snakemake", "-c2", "--keep-going", "--rerun-incomplete", "results/agent_sft/"]
        done = subprocess.run(["nice", "-n", "10", *command], cwd=repo, env=env, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    minutes = round((time.perf_counter() - start) / 60 + sum(earlier), 1)
    scored = repo / "work" / "agent_sft" / "agent_eval.json"
    if not scored.is_file():  # (a failed check leaves it: the point is recorded and fails its expect)
        raise RuntimeError(
            f"point {folder.name}: snakemake exited {done.returncode}; see {folder / 'snakemake.log'}"
        )
    agent = json.loads(scored.read_text())
    metrics = {f"eval/{k}": v for k, v in agent["after"].items() if k != "problems"}
    metrics |= {f"before/{k}": v for k, v in agent["before"].items() if k != "problems"}
    metrics |= {f"gain/{k}": v for k, v in agent["gain"].items()}
    card = json.loads((repo / "work" / "agent_base" / "traces_data" / "card.json").read_text())
    steps = [
        json.loads(line).get("step")
        for line in (repo / "work" / "agent_base" / "train" / "metrics.jsonl").open()
    ]
    record = {
        "name": "agent_sft",
        "seed": seed,
        "forward": forward,
        "minutes": minutes,
        "attempts": len(earlier) + 1,
        "load_start": round(load, 1),
        "load_end": round(os.getloadavg()[0], 1),
        "base_steps": max(s for s in steps if s is not None),
        "rows": sum(card["rows_out"].values()),
        "check": "passed" if done.returncode == 0 else "failed",
        "expect": expect,
        "command": "python examples/agent_tools/seeds.py",
    }
    atomic_write_text(folder / "run.json", json.dumps(record, indent=2) + "\n")
    atomic_write_text(
        folder / "eval.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n"
    )  # last: done
    print(
        f"{folder.name}: {metrics} ({minutes} min, load {record['load_start']}-{record['load_end']})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    from toolbox.results.matrix import parse_seeds

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--forwards", default="lean,exact")
    p.add_argument("--out", default="work/agent_matrix")
    p.add_argument("--jobs", type=int, default=2, help="points run at once")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    points = [(s, f) for s in parse_seeds(a.seeds) for f in a.forwards.split(",")]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for future in [pool.submit(run_point, s, f, out) for s, f in points]:
            future.result()
    return 0


if __name__ == "__main__":
    sys.exit(main())
