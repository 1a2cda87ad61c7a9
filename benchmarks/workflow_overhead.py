"""What the workflow costs before any real work: Snakemake's dry run on many runs, a no-op rerun,
and the start-up of the `toolbox` command that every stage pays.

The dry run is compared, in alternating rounds (``benchmarks/harness``), with ``snakemake -n`` on a
plain Snakefile of the same shape (as many runs, each a chain of as many ``touch`` rules, and one
``all`` rule: the real job count, read from Snakemake's own job table of our dry run; none of our
workflow's config reading, input functions, checkpoint, logs and benchmarks) and with the bare
``snakemake --version`` start-up. Every figure is a fresh process's wall time and CPU time (user +
system of the child, from ``getrusage(RUSAGE_CHILDREN)``): on a shared machine the wall time
measures the load, the CPU time the work. Ratios are taken round by round from unrounded values;
``dry_run_vs_plain`` is ours / plain (the goal: <= 1.3 at 100 and at 1000 runs). The workflow runs
in a temporary copy of the repo (Snakefile, workflow/, toolbox/configs/) with:

- ``dry_run``: ``snakemake -n --quiet`` on a generated config of ``--runs`` runs (every stage of
  every run to do), ``plain_dry_run`` and ``snakemake_version`` beside it;
- ``dry_run_1``: the same on a config of one run, ``snakemake -n results/run000/``;
- ``noop_rerun``: ``snakemake -c2 results/<run>/`` once the tiny run (or ``--run demo``) is built;
- ``toolbox_help`` / ``toolbox_compose``: ``toolbox --help`` and ``toolbox compose --out F``;
- ``slicer``: ``python workflow/scripts/slice_config.py`` (the rest of the compose stage).

Prints one JSON object (``--out F`` also writes it).

    python benchmarks/workflow_overhead.py [--rounds 3] [--runs 100] [--run tiny|demo] [--skip-noop]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from harness.machine import load
from harness.rounds import Rounds, spread

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TINY = [
    "model.num_layers=1",
    "data.source.num_train=256",
    "data.source.num_test=32",
    "trainer.max_steps=20",
    "trainer.eval_every=10",
    "trainer.save_every=10",
    "eval.exact_match.max_examples=16",
    "device=cpu",
]


def tool(name: str) -> str:
    return str(BIN / name) if (BIN / name).exists() else name


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "TOKENIZERS_PARALLELISM": "false",
    }


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(cmd: list[str], cwd: Path) -> dict[str, float]:
    """One fresh process: its wall time and its CPU time (user + system), unrounded."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": cpu}


def timed(cmd: list[str], cwd: Path, repeats: int) -> dict[str, dict]:
    """``repeats`` fresh processes: min/median/max of the wall and the CPU time."""
    each = [once(cmd, cwd) for _ in range(repeats)]
    return {figure: spread([e[figure] for e in each]) for figure in ("wall_s", "cpu_s")}


def job_count(cwd: Path) -> dict[str, int]:
    """Jobs per rule and in total, from the job table ``snakemake -n`` prints."""
    res = subprocess.run(
        [tool("snakemake"), "-n"], cwd=cwd, env=env(), capture_output=True, text=True, check=True
    )
    counts = {}
    for line in (res.stdout + res.stderr).splitlines():
        m = re.fullmatch(r"([A-Za-z_][\w]*)\s+(\d+)", line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    if "total" not in counts:
        raise SystemExit(
            f"snakemake -n in {cwd} printed no job table (total N); its output:\n{res.stdout[-2000:]}"
        )
    return counts


def plain_snakefile(root: Path, runs: int, chain: int, singles: int = 0) -> Path:
    """A Snakefile of ``runs`` chains of ``chain`` touch rules, ``singles`` one-job rules and one
    ``all`` rule: ``runs * chain + singles + 1`` jobs."""
    root.mkdir(parents=True)
    rules = [f'RUNS = [f"run{{i:04d}}" for i in range({runs})]', "", "rule all:"]
    singles_in = "".join(f', "single{j}"' for j in range(singles))
    rules.append(f'    input: expand("out/{{run}}/s{chain - 1}", run=RUNS){singles_in}')
    for k in range(chain):
        rules += ["", f"rule s{k}:"]
        if k:
            rules.append(f'    input: "out/{{run}}/s{k - 1}"')
        rules += [f'    output: "out/{{run}}/s{k}"', '    shell: "touch {output}"']
    for j in range(singles):
        rules += ["", f"rule single{j}:", f'    output: "single{j}"', '    shell: "touch {output}"']
    (root / "Snakefile").write_text("\n".join(rules) + "\n")
    return root


def make_copy(root: Path, runs: dict) -> Path:
    root.mkdir(parents=True)
    shutil.copy2(REPO / "Snakefile", root / "Snakefile")
    shutil.copytree(REPO / "workflow", root / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "toolbox" / "configs", root / "toolbox" / "configs")
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(yaml.safe_dump({"runs": runs}, sort_keys=False))
    subprocess.run([sys.executable, "workflow/generate.py", "dvc"], cwd=root, check=True, capture_output=True)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the dry runs")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes of every other figure")
    parser.add_argument("--runs", type=int, default=100, help="runs in the generated config of the dry run")
    parser.add_argument(
        "--run", choices=["tiny", "demo"], default="tiny", help="the run built for the no-op rerun"
    )
    parser.add_argument(
        "--skip-noop", action="store_true", help="skip the no-op rerun (it first builds the run)"
    )
    parser.add_argument(
        "--dry-run-only", action="store_true", help="only the dry runs of ours, the plain peer and --version"
    )
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    out: dict = {
        "benchmark": "workflow_overhead",
        "command": " ".join(["python", "benchmarks/workflow_overhead.py", *sys.argv[1:]]),
        "runs": args.runs,
        "cores": os.cpu_count(),
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory(prefix="workflow-overhead-") as tmp:
        tmp = Path(tmp)
        many = {
            f"run{i:03d}": {"experiment": "demo", "overrides": [f"seed={i}", *TINY]} for i in range(args.runs)
        }
        big = make_copy(tmp / "many", many)
        jobs = job_count(big)
        chain = max(1, (jobs["total"] - 1) // args.runs)
        plain = plain_snakefile(tmp / "plain", args.runs, chain, jobs["total"] - 1 - args.runs * chain)
        plain_jobs = job_count(plain)["total"]
        if plain_jobs != jobs["total"]:
            raise SystemExit(
                f"the plain Snakefile plans {plain_jobs} jobs, ours {jobs['total']}: not the same shape"
            )
        out["jobs"] = jobs["total"]
        out["jobs_per_rule"] = jobs
        dry_run = [tool("snakemake"), "-n", "--quiet"]
        rounds = Rounds(
            {
                "toolbox": lambda: once(dry_run, big),
                "plain": lambda: once(dry_run, plain),
                "snakemake_version": lambda: once([tool("snakemake"), "--version"], tmp),
            },
            None,
            args.rounds,
        ).run()
        out["rounds"] = rounds.rounds
        out["orders"] = rounds.orders
        out["each_round"] = rounds.each
        out["sides"] = rounds.summary()
        out["dry_run_vs_plain"] = {
            figure: {
                **spread([o / p for o, p in zip(rounds.values("toolbox", figure), rounds.values("plain", figure), strict=True)]),
                "of_medians": rounds.summary()["toolbox"][figure]["median"] / rounds.summary()["plain"][figure]["median"],
            }
            for figure in ("cpu_s", "wall_s")
        }  # fmt: skip
        out["goal_dry_run_vs_plain_at_most"] = 1.3
        out["goal_met_by_cpu_median"] = out["dry_run_vs_plain"]["cpu_s"]["median"] <= 1.3

        if not args.dry_run_only:
            out["dry_run_1"] = timed(
                [tool("snakemake"), "-n", "results/run000/", "--quiet"],
                make_copy(tmp / "one", {"run000": many["run000"]}),
                args.repeats,
            )
            out["toolbox_help"] = timed([tool("toolbox"), "--help"], tmp, args.repeats)
            out["toolbox_compose"] = timed(
                [tool("toolbox"), "compose", "--out", str(tmp / "c.yaml")], tmp, args.repeats
            )
            out["slicer"] = timed(
                [sys.executable, str(REPO / "workflow/scripts/slice_config.py"), str(tmp / "c.yaml"), "--defaults", str(tmp / "c.yaml"),
                 "--out-dir", str(tmp / "slices")],
                tmp, args.repeats,
            )  # fmt: skip

        if not args.skip_noop and not args.dry_run_only:
            entry = {"experiment": "demo", "overrides": TINY if args.run == "tiny" else []}
            small = make_copy(tmp / "built", {args.run: entry})
            t0 = time.perf_counter()
            subprocess.run(
                [tool("snakemake"), "-c2", f"results/{args.run}/"],
                cwd=small,
                env=env(),
                check=True,
                capture_output=True,
            )
            out["build_s"] = time.perf_counter() - t0
            out["noop_rerun"] = timed([tool("snakemake"), "-c2", f"results/{args.run}/"], small, args.repeats)
            out["noop_rerun"]["run"] = args.run

    out["load_after"] = load()
    text = json.dumps(out, indent=2) + "\n"
    if args.out:
        from toolbox.core.atomic import atomic_write_text

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
