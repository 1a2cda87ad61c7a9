"""The agent loop of config/config.yaml (agent_base -> agent run -> traces -> agent_sft -> eval ->
check, and on to agent_grpo with ``--run agent_grpo``) over seeds and ``trainer.forward``, each
point a ``snakemake -c2 results/<run>/`` of its own copy of this checkout, collected as a
perturbation matrix for ``toolbox report``.

    python examples/agent_tools/seeds.py --seeds 0-2 --forwards lean,exact --out work/agent_matrix
    toolbox report --matrix work/agent_matrix --expect-run agent_sft \\
        --into examples/agent_tools/README.md --block agent-matrix
    python examples/agent_tools/seeds.py --run agent_grpo --seeds 0-2 --out work/agent_matrix
    toolbox report --matrix work/agent_matrix/agent_grpo --expect-run agent_grpo \\
        --into examples/agent_tools/README.md --block agent-grpo-matrix

A point ``s<seed>-<forward>`` copies the files git tracks (and untracked ones it does not ignore)
into ``<out>/<label>/repo`` (one copy per point, shared by the runs of the chain: agent_grpo's
point starts from the agent_sft already trained there), adds ``seed=<seed>`` to the overrides of
every run of the chain and ``trainer.forward=<forward>`` to those whose trainer has the field (the
supervised ones: agent_grpo's forward is its start's) in its ``config/config.yaml`` (the other seeds
of the README are this and nothing else), and runs the workflow there (``nice``, one torch thread
per job as the runs declare). For agent_sft it writes ``<label>/eval.json``
(``results/agent_sft/agent_eval.json``: ``eval/<metric>`` after training on the traces,
``before/<metric>`` the base, ``gain/<metric>``) and ``run.json`` (seed, forward, wall minutes, the
load average at start and end, the base's stopping step, the dataset's rows, and agent_sft's
``expect:``); for a later run ``<run>/<label>/eval.json`` (the run's eval.json: ``before/`` is the
model it starts from) and ``run.json`` (the same record, its steps and its check). A point with an
eval.json is not run again; an interrupted one (its copy there, no eval.json) is resumed in its
copy: files that changed in the checkout are copied again, Snakemake is unlocked and reruns what
is incomplete or out of date (a train job continues from its last checkpoint), and ``minutes``
adds the earlier attempts' wall time (each Snakemake log's start to its last write) to this one's.

agent.py's paired comparison of the two models on the same held-out problems (problems won and
lost, the gain's standard error) becomes ``gain/<metric>_won``, ``_lost`` and ``_se``; ``--paired``
adds it to points finished before agent.py had it, by running their held-out evaluation again.
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
CONFIG = "config/config.yaml"


def chain(runs: dict, run: str) -> list[str]:
    """run and the runs it starts from (``init_from``) or trains on the traces of
    (``data_from_traces``), transitively, upstream first."""
    entry = runs[run]
    ups = [u for u in (entry.get("init_from"), entry.get("data_from_traces")) if u]
    order = [r for u in ups for r in chain(runs, u)]
    return [*dict.fromkeys([*order, run])]


def has_forward(runs: dict, run: str) -> bool:
    """Whether a point's ``trainer.forward`` applies to the run: a supervised trainer's (the matrix
    perturbs the supervised stages, as ``toolbox matrix`` does; a GRPO trainer's ``forward`` only
    chooses how its log-probs are computed and keeps its default)."""
    from toolbox.core.registries import TRAINERS
    from toolbox.experiment.compose import load_config
    from toolbox.trainer.grpo import GRPOTrainer

    cfg = load_config([f"experiment={runs[run]['experiment']}", *(runs[run].get("overrides") or [])])
    trainer = TRAINERS.get(str(cfg.trainer.name))
    return "forward" in cfg.trainer and not (isinstance(trainer, type) and issubclass(trainer, GRPOTrainer))


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


def configure(repo: Path, seed: int, forward: str, run: str, forwards: set[str]) -> dict:
    """The checkout's config with the point's overrides added to every run of run's chain
    (``seed=``; ``trainer.forward=`` to those in forwards, the runs whose trainer has the field),
    written into repo when it differs; return run's expect:."""
    import yaml

    config = yaml.safe_load((ROOT / CONFIG).read_text())
    for name in chain(config["runs"], run):
        entry = config["runs"][name]
        added = [f"seed={seed}", *([f"trainer.forward={forward}"] if name in forwards else [])]
        entry["overrides"] = [*(entry.get("overrides") or []), *added]
    text, path = yaml.safe_dump(config, sort_keys=False), repo / CONFIG
    if not (path.is_file() and path.read_text() == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return config["runs"][run].get("expect") or {}


def attempt_minutes(repo: Path) -> list[float]:
    """Wall minutes of the Snakemake runs already made in repo: each log's start (its name) to its
    last write; the last run's job may have written on after its log (a killed training), so that
    run ends at the last write under work/ too."""
    logs = [
        log
        for log in sorted((repo / ".snakemake" / "log").glob("*.snakemake.log"))
        if "Unlocked working directory." not in log.read_text()  # (a --unlock call, no attempt)
    ]
    minutes = []
    for i, log in enumerate(logs):
        start = datetime.strptime(log.name.split(".snakemake")[0], "%Y-%m-%dT%H%M%S.%f").timestamp()
        end = log.stat().st_mtime
        if i == len(logs) - 1:
            end = max([end, *(f.stat().st_mtime for f in (repo / "work").rglob("*") if f.is_file())])
        minutes.append(round((end - start) / 60, 1))
    return minutes


def run_point(
    seed: int, forward: str, out: Path, run: str = "agent_sft", forwards: frozenset = frozenset()
) -> None:
    """One point: ``snakemake -c2 results/<run>/`` in the point's copy ``<out>/s<seed>-<forward>/repo``
    (shared by every run of the chain: agent_grpo's point finds agent_sft's done there)."""
    label = f"s{seed}-{forward}"
    folder = out / label if run == "agent_sft" else out / run / label
    if (folder / "eval.json").is_file():
        return
    repo = out / label / "repo"
    earlier = attempt_minutes(repo)  # an interrupted point is resumed in its copy
    copy_checkout(repo)
    expect = configure(repo, seed, forward, run, forwards)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_WAIT_POLICY": "PASSIVE"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    target = f"results/{run}/"
    if earlier:  # a killed Snakemake leaves its lock
        subprocess.run(["snakemake", "--unlock", target], cwd=repo, env=env, check=True, capture_output=True)
    load, start = os.getloadavg()[0], time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "snakemake.log", "a" if earlier else "w") as log:
        command = ["snakemake", "-c2", "--keep-going", "--rerun-incomplete", target]
        done = subprocess.run(["nice", "-n", "10", *command], cwd=repo, env=env, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    minutes = round((time.perf_counter() - start) / 60 + sum(earlier), 1)
    scored = repo / "work" / run / ("agent_eval.json" if run == "agent_sft" else "eval.json")
    if not scored.is_file():  # (a failed check leaves it: the point is recorded and fails its expect)
        raise RuntimeError(
            f"point {label}: snakemake exited {done.returncode}; see {folder / 'snakemake.log'}"
        )
    record = {"seed": seed, "forward": forward, "minutes": minutes, "attempts": len(earlier) + 1,
              "load_start": round(load, 1), "load_end": round(os.getloadavg()[0], 1)}  # fmt: skip
    command = f"python examples/agent_tools/seeds.py --run {run}"
    if run == "agent_sft":
        write_point(folder, repo, record, done.returncode == 0, expect, command)
    else:
        write_run_point(folder, repo, run, record, expect, command)


def yaml_runs(repo: Path) -> dict:
    """The runs of repo's config/config.yaml."""
    import yaml

    return yaml.safe_load((repo / CONFIG).read_text())["runs"]


def write_point(folder: Path, repo: Path, record: dict, passed: bool, expect: dict, command: str) -> None:
    """The point's eval.json (agent_sft's agent_eval.json: eval/, before/, gain/) and run.json
    (record, the base's stopping step, the dataset's rows, the check)."""
    agent = json.loads((repo / "work" / "agent_sft" / "agent_eval.json").read_text())
    metrics = {f"eval/{k}": v for k, v in agent["after"].items() if k != "problems"}
    metrics |= {f"before/{k}": v for k, v in agent["before"].items() if k != "problems"}
    metrics |= {f"gain/{k}": v for k, v in agent["gain"].items()} | paired_metrics(agent)
    card = json.loads((repo / "work" / "agent_base" / "traces_data" / "card.json").read_text())
    record = {
        "name": "agent_sft",
        **record,
        "base_steps": last_step(repo / "work" / "agent_base" / "train" / "metrics.jsonl"),
        "rows": sum(card["rows_out"].values()),
        "check": "passed" if passed else "failed",
        "expect": expect,
        "command": command,
    }
    write_files(folder, record, metrics)


def write_run_point(folder: Path, repo: Path, run: str, record: dict, expect: dict, command: str) -> None:
    """A run after agent_sft (agent_grpo): its eval.json (``eval/``, ``before/`` the model it starts
    from, ``gain/``) and run.json (record, the check, the steps trained)."""
    work = repo / "work" / run
    check = work / "check.json"
    record = {
        "name": run,
        **record,
        "steps": last_step(work / "train" / "metrics.jsonl"),
        "check": "passed" if check.is_file() and json.loads(check.read_text())["passed"] else "failed",
        "expect": expect,
        "command": command,
    }
    write_files(folder, record, json.loads((work / "eval.json").read_text()))


def last_step(metrics: Path) -> int:
    """The last step a run's metrics.jsonl records."""
    steps = [json.loads(line).get("step") for line in metrics.open()]
    return max(s for s in steps if s is not None)


def write_files(folder: Path, record: dict, metrics: dict) -> None:
    """A point's run.json, then its eval.json (last: the point is done)."""
    from toolbox.core.atomic import atomic_write_text

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "run.json", json.dumps(record, indent=2) + "\n")
    atomic_write_text(folder / "eval.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    print(f"{record['name']} {folder.name}: {metrics} ({record.get('minutes')} min)", flush=True)


def paired_metrics(agent: dict) -> dict:
    """agent.py's paired comparison (problems won and lost, the gain's standard error) as
    ``gain/<metric>_won``, ``_lost``, ``_se``."""
    return {f"gain/{m}_{k}": v for m, d in (agent.get("paired") or {}).items() for k, v in d.items()}


def add_paired(folder: Path) -> None:
    """A finished point whose agent.py predates the paired comparison: evaluate its two models on
    the held-out problems again (greedy) with this checkout's agent.py and the run's own agent
    arguments, and add the comparison to eval.json when the scores are the pipeline's."""
    import yaml

    from toolbox.core.atomic import atomic_write_text

    metrics = json.loads((folder / "eval.json").read_text())
    if "gain/tool_call_success_se" in metrics:
        return
    repo = folder / "repo"
    args = yaml.safe_load((repo / CONFIG).read_text())["runs"]["agent_sft"]["agent"]["args"]
    out = folder / "paired"
    command = [sys.executable, str(ROOT / "examples" / "agent_tools" / "agent.py"),
               "--model", "work/agent_sft/train/model", "--before-model", "work/agent_base/train/model",
               "--traces", str(out / "traces.sqlite"), "--eval", str(out / "agent_eval.json"), *map(str, args)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    with open(folder / "paired.log", "w") as log:
        subprocess.run(["nice", "-n", "10", *command], cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                       check=True)  # fmt: skip
    agent = json.loads((out / "agent_eval.json").read_text())
    again = {f"{side}/{k}": agent[name][k] for side, name in (("eval", "after"), ("before", "before"))
             for k in ("tool_call_success", "answer_accuracy")}  # fmt: skip
    differ = {k: (metrics[k], v) for k, v in again.items() if metrics[k] != v}
    if differ:
        print(
            f"{folder.name}: the held-out scores differ from the pipeline's {differ}; not added", flush=True
        )
        return
    metrics |= paired_metrics(agent)
    atomic_write_text(folder / "eval.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    print(f"{folder.name}: {paired_metrics(agent)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from toolbox.results.matrix import parse_seeds

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--run", default="agent_sft", help="the run whose eval each point reports (agent_sft, agent_grpo)"
    )
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--forwards", default="lean,exact")
    p.add_argument("--out", default="work/agent_matrix")
    p.add_argument("--jobs", type=int, default=2, help="points run at once")
    p.add_argument(
        "--checkout",
        metavar="LABEL",
        help="collect this checkout's own agent_sft (after `dvc repro` or `snakemake` here) as point LABEL",
    )
    p.add_argument("--minutes", type=float, help="with --checkout: the wall minutes that run took")
    p.add_argument("--command", default="dvc repro check-agent_sft publish-agent_sft", help="with --checkout")
    p.add_argument(
        "--paired",
        action="store_true",
        help="add the paired comparison to finished points that lack it (their held-out runs again)",
    )
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    points = [(s, f) for s in parse_seeds(a.seeds) for f in a.forwards.split(",")]
    if a.checkout:
        import yaml

        config = yaml_runs(ROOT)
        train = yaml.safe_load((ROOT / "work" / "agent_sft" / "config" / "train.yaml").read_text())
        check = json.loads((ROOT / "work" / "agent_sft" / "check.json").read_text())
        record = {"seed": train.get("seed", 0), "forward": train["trainer"]["forward"], "minutes": a.minutes,
                  "via": a.command.split()[0]}  # fmt: skip
        write_point(out / a.checkout, ROOT, record, check["passed"], config["agent_sft"].get("expect") or {},
                    a.command)  # fmt: skip
        return 0
    if a.paired:
        for s, f in points:
            if (out / f"s{s}-{f}" / "eval.json").is_file():
                add_paired(out / f"s{s}-{f}")
        return 0
    runs = yaml_runs(ROOT)
    forwards = frozenset(r for r in chain(runs, a.run) if has_forward(runs, r))  # (Hydra: not in threads)
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for future in [pool.submit(run_point, s, f, out, a.run, forwards) for s, f in points]:
            future.result()
    return 0


if __name__ == "__main__":
    sys.exit(main())
