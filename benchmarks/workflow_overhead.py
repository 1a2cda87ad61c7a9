"""What the workflow costs before any real work: Snakemake's dry run on 100 runs, a no-op rerun,
and the start-up of the `toolbox` command that every stage pays.

Peers: the bare ``snakemake --version`` start-up, and ``snakemake -n`` on a plain Snakefile of the
same shape (as many runs, each a chain of as many ``touch`` rules, and one ``all`` rule: the same
job count, none of our workflow's config reading and rule generation). Each figure is the median of ``--repeats`` wall
times of a fresh process (the machine is shared: the load average is printed too). The workflow
runs in a temporary copy of the repo (Snakefile, workflow/, toolbox/configs/) with:

- ``dry_run_100``: ``snakemake -n`` on a generated config of 100 runs (every stage of every run
  to do; the job count is read from Snakemake's own job table), goal < 3 s here, and
  ``plain_dry_run_100`` with ``dry_run_ratio_vs_plain`` beside it;
- ``noop_rerun``: ``snakemake -c2 results/<run>/`` once the tiny run (or ``--run demo``) is built;
- ``toolbox_help`` / ``toolbox_compose``: ``toolbox --help`` and ``toolbox compose --out F``;
- ``slicer``: ``python workflow/scripts/slice_config.py`` (the rest of the compose stage).

Prints one JSON object.

    python benchmarks/workflow_overhead.py [--repeats 3] [--run tiny|demo] [--skip-noop]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

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


def timed(cmd: list[str], cwd: Path, repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3)}


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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=100, help="runs in the generated config of the dry run")
    parser.add_argument(
        "--run", choices=["tiny", "demo"], default="tiny", help="the run built for the no-op rerun"
    )
    parser.add_argument(
        "--skip-noop", action="store_true", help="skip the no-op rerun (it first builds the run)"
    )
    args = parser.parse_args()

    out: dict = {"load_avg_1m": round(os.getloadavg()[0], 2), "repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="workflow-overhead-") as tmp:
        tmp = Path(tmp)
        out["snakemake_version"] = timed([tool("snakemake"), "--version"], tmp, args.repeats)

        many = {
            f"run{i:03d}": {"experiment": "demo", "overrides": [f"seed={i}", *TINY]} for i in range(args.runs)
        }
        big = make_copy(tmp / "many", many)
        out[f"dry_run_{args.runs}"] = timed([tool("snakemake"), "-n", "--quiet"], big, args.repeats)
        jobs = job_count(big)
        out[f"dry_run_{args.runs}"]["jobs"] = jobs["total"]
        out[f"dry_run_{args.runs}"]["jobs_per_rule"] = jobs
        chain = max(1, (jobs["total"] - 1) // args.runs)
        plain = plain_snakefile(tmp / "plain", args.runs, chain, jobs["total"] - 1 - args.runs * chain)
        out[f"plain_dry_run_{args.runs}"] = timed([tool("snakemake"), "-n", "--quiet"], plain, args.repeats)
        out[f"plain_dry_run_{args.runs}"]["jobs"] = job_count(plain)["total"]
        out["dry_run_ratio_vs_plain"] = (
            out[f"dry_run_{args.runs}"]["median_s"] / out[f"plain_dry_run_{args.runs}"]["median_s"]
        )
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

        if not args.skip_noop:
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
            out["build_s"] = round(time.perf_counter() - t0, 1)
            out["noop_rerun"] = timed([tool("snakemake"), "-c2", f"results/{args.run}/"], small, args.repeats)
            out["noop_rerun"]["run"] = args.run

    base = out["snakemake_version"]["median_s"]
    out["ratios_to_snakemake_version"] = {
        k: round(v["median_s"] / base, 2)
        for k, v in out.items()
        if isinstance(v, dict) and "median_s" in v and k != "snakemake_version"
    }
    out[f"dry_run_{args.runs}_under_3s"] = out[f"dry_run_{args.runs}"]["median_s"] < 3.0
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
