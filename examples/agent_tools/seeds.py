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
dataset's rows, and agent_sft's ``expect:``). A point with an eval.json is not run again.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("agent_base", "agent_sft")


def copy_checkout(dest: Path) -> None:
    """The checkout's files as git sees them (tracked, and untracked ones not ignored)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def configure(repo: Path, seed: int, forward: str) -> dict:
    """Add the point's overrides to both runs; return agent_sft's expect:."""
    import yaml

    path = repo / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    for run in RUNS:
        entry = config["runs"][run]
        entry["overrides"] = [*(entry.get("overrides") or []), f"seed={seed}", f"trainer.forward={forward}"]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config["runs"]["agent_sft"].get("expect") or {}


def run_point(seed: int, forward: str, out: Path) -> None:
    from toolbox.core.atomic import atomic_write_text

    folder = out / f"s{seed}-{forward}"
    if (folder / "eval.json").is_file():
        return
    repo = folder / "repo"
    if repo.exists():  # an interrupted point: start it again from a fresh copy
        shutil.rmtree(repo)
    copy_checkout(repo)
    expect = configure(repo, seed, forward)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_WAIT_POLICY": "PASSIVE"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    load, start = os.getloadavg()[0], time.perf_counter()
    with open(folder / "snakemake.log", "w") as log:
        done = subprocess.run(["nice", "-n", "10", "snakemake", "-c2", "--keep-going", "results/agent_sft/"],
                              cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    minutes = round((time.perf_counter() - start) / 60, 1)
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
