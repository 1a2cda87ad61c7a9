"""What the workflow costs before any real work: Snakemake's dry run on many runs, a no-op rerun,
and the start-up of the `toolbox` command that every stage pays.

The dry run is compared, in alternating rounds (``benchmarks/harness``), with ``snakemake -n`` on a
plain Snakefile of the same shape (``plain``: the same rules and jobs with the same input, output,
log and benchmark files, read from our dry run's job list, each rule a ``touch``; none of our
workflow's config reading and validation, input/params functions, checkpoint, conda environment
and report entries: ``same_shape_snakefile``), with a chain of as many ``touch`` rules per run
(``chain``: the real job count, one input and one output a job, no logs or benchmarks: the peer
of earlier measurements) and with the bare ``snakemake --version`` start-up. Every figure is a fresh process's wall time and CPU time (user +
system of the child, from ``getrusage(RUSAGE_CHILDREN)``): on a shared machine the wall time
measures the load, the CPU time the work. Ratios are taken round by round from unrounded values;
``dry_run_vs_plain`` is ours / plain (the goal: <= 1.3 at 100 and at 1000 runs), ``dry_run_vs_chain``
ours / chain. The workflow runs
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


JOB_FIELDS = ("input", "output", "log", "benchmark", "wildcards")


def dry_run_jobs(cwd: Path) -> list[dict]:
    """The jobs ``snakemake -n`` plans in ``cwd``: each job's rule, whether the rule is a checkpoint,
    and its input, output, log and benchmark files and wildcards, as Snakemake prints them."""
    res = subprocess.run(
        [tool("snakemake"), "-n"], cwd=cwd, env=env(), capture_output=True, text=True, check=True
    )
    jobs: list[dict] = []
    job: dict | None = None
    for line in (res.stdout + res.stderr).splitlines():
        head = re.fullmatch(r"(?:local)?(rule|checkpoint) (\w+):", line.strip())
        if head:
            job = {"rule": head.group(2), "checkpoint": head.group(1) == "checkpoint"}
            job.update({field: [] for field in JOB_FIELDS})
            jobs.append(job)
            continue
        field = re.fullmatch(r"    (\w+): (.*)", line)
        if job is not None and field and field.group(1) in JOB_FIELDS:
            job[field.group(1)] = field.group(2).split(", ")
        elif not line.startswith("    "):
            job = None
    if not jobs:
        raise SystemExit(f"snakemake -n in {cwd} planned no job; its output:\n{res.stdout[-2000:]}")
    return jobs


def jobs_per_rule(jobs: list[dict]) -> dict[str, int]:
    """Jobs per rule and in total (Snakemake's job table) of ``dry_run_jobs``."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["rule"]] = counts.get(job["rule"], 0) + 1
    return {**counts, "total": len(jobs)}


def shape(jobs: list[dict]) -> dict[str, int]:
    """What a dry run's DAG is made of: jobs, rules, and input, output, log and benchmark files."""
    return {
        "jobs": len(jobs),
        "rules": len({j["rule"] for j in jobs}),
        **{f"{field}s": sum(len(j[field]) for j in jobs) for field in JOB_FIELDS[:-1]},
    }


def same_shape_snakefile(root: Path, jobs: list[dict]) -> Path:
    """A plain Snakefile of the same DAG as ``jobs`` (``dry_run_jobs`` of our workflow): the same
    rules, each a ``touch`` of its outputs with the same input, output, log and benchmark files per
    job (with wildcards where ours has them: one rule per rule, its first job as the template), and
    the same wildcard constraint; none of our config reading and validation, input, params and
    resource functions, checkpoint, conda environment or report entries. An input a job reads
    through the checkpoint (``<TBD>`` before it ran) is the checkpoint's target, its first output,
    as in Snakemake's DAG. The inputs no job makes (ours: source files) exist, empty. Not mirrored: directory() flags, names of inputs and outputs, and rules
    that plan no job."""
    root.mkdir(parents=True)
    targets: dict[tuple, str] = {}  # the wildcards of a checkpoint job -> its target
    for job in jobs:
        if job["checkpoint"]:
            targets[tuple(job["wildcards"])] = job["output"][0]

    def template(path: str, wildcards: list[str]) -> str:
        for pair in wildcards:
            name, _, value = pair.partition("=")
            path = re.sub(rf"(?<![^/]){re.escape(value)}(?![^/])", "{" + name + "}", path)
        return path

    rules: dict[str, list[str]] = {}
    for job in jobs:
        if job["rule"] in rules:
            continue
        inputs = [targets[tuple(job["wildcards"])] if f == "<TBD>" else f for f in job["input"]]
        lines = [f"rule {job['rule']}:"]
        for field, files in (("input", inputs), ("output", job["output"]), ("log", job["log"]),
                             ("benchmark", job["benchmark"])):  # fmt: skip
            if files:
                lines.append(f"    {field}: " + ", ".join(repr(template(f, job["wildcards"])) for f in files))
        if job["output"]:
            lines.append('    shell: "touch {output}"')
        rules[job["rule"]] = lines
    made = {f for job in jobs for f in job["output"]}
    for source in {f for job in jobs for f in job["input"]} - made - {"<TBD>"}:  # ours has them
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).touch()
    first = [name for name in rules if name == "all"]  # the default target: Snakemake's first rule
    order = first + [name for name in rules if name not in first]
    text = 'wildcard_constraints:\n    run="[A-Za-z0-9][A-Za-z0-9_-]*"\n\n'
    (root / "Snakefile").write_text(text + "\n\n".join("\n".join(rules[n]) for n in order) + "\n")
    return root


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
        ours = dry_run_jobs(big)
        jobs = jobs_per_rule(ours)
        plain = same_shape_snakefile(tmp / "plain", ours)
        plain_shape = shape(dry_run_jobs(plain))
        if plain_shape != shape(ours):
            raise SystemExit(
                f"the plain Snakefile plans {plain_shape}, ours {shape(ours)}: not the same shape"
            )
        links = max(1, (jobs["total"] - 1) // args.runs)
        chain = plain_snakefile(tmp / "chain", args.runs, links, jobs["total"] - 1 - args.runs * links)
        chain_shape = shape(dry_run_jobs(chain))
        if chain_shape["jobs"] != jobs["total"]:
            raise SystemExit(f"the chain Snakefile plans {chain_shape['jobs']} jobs, ours {jobs['total']}")
        out["jobs"] = jobs["total"]
        out["jobs_per_rule"] = jobs
        out["shape"] = plain_shape  # ours too (checked above)
        out["chain_shape"] = chain_shape
        dry_run = [tool("snakemake"), "-n", "--quiet"]
        rounds = Rounds(
            {
                "toolbox": lambda: once(dry_run, big),
                "plain": lambda: once(dry_run, plain),
                "chain": lambda: once(dry_run, chain),
                "snakemake_version": lambda: once([tool("snakemake"), "--version"], tmp),
            },
            None,
            args.rounds,
        ).run()
        out["rounds"] = rounds.rounds
        out["orders"] = rounds.orders
        out["each_round"] = rounds.each
        out["sides"] = rounds.summary()
        for peer in ("plain", "chain"):
            out[f"dry_run_vs_{peer}"] = {
                figure: {
                    **spread([o / p for o, p in zip(rounds.values("toolbox", figure), rounds.values(peer, figure), strict=True)]),
                    "of_medians": rounds.summary()["toolbox"][figure]["median"] / rounds.summary()[peer][figure]["median"],
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
