"""toolbox plan: Snakemake's dry run made exact by composing first (compose is a checkpoint)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from workflow_copy import Workflow, tiny_config, tool

from toolbox.results.plan import parse_dry_run

DRY_RUN = """\
Building DAG of jobs...
Job stats:
job      count
-----  -------
eval         1

rule eval:
    input: work/tiny/config/eval.yaml, work/tiny/data, work/tiny/train/model
    output: work/tiny/eval.json
    log: work/tiny/logs/eval.log
    jobid: 3
    benchmark: work/tiny/benchmarks/eval.tsv
    reason: Input files updated by another job: work/tiny/config/eval.yaml
    wildcards: run=tiny
    resources: tmpdir=<TBD>

localrule all:
    input: results/tiny
    jobid: 0
    reason: Input files updated by another job: results/tiny
    resources: tmpdir=<TBD>

checkpoint compose:
    output: work/tiny/config/full.yaml
    reason: Missing output files: work/tiny/config/full.yaml
    wildcards: run=tiny
"""


def test_parse_dry_run_reads_stage_run_and_reason() -> None:
    jobs = parse_dry_run(DRY_RUN)
    assert [(j.stage, j.run, j.reason) for j in jobs] == [
        ("eval", "tiny", "Input files updated by another job: work/tiny/config/eval.yaml"),
        ("compose", "tiny", "Missing output files: work/tiny/config/full.yaml"),
    ]


HEAVY = re.compile(r"^import time:.*\|\s+(torch|transformers|datasets)$", re.M)


def test_plan_of_a_fresh_workflow_lists_every_stage_after_composing(workflow_copy: Workflow) -> None:
    """Issue 38: `toolbox plan results/demo/` took minutes on a fresh clone, most of it `toolbox
    compose` importing torch and transformers; every process of the plan now imports none of them
    (each Python process prints its imports: PYTHONPROFILEIMPORTTIME)."""
    workflow_copy.env["PYTHONPROFILEIMPORTTIME"] = "1"
    # Snakemake's SLURM plugin asks `scontrol show config` on import (2 s where no controller
    # answers): the plan's calls give it the empty config, which it reads at once
    root = Path(workflow_copy.root)
    fake = root / "fake_bin"
    fake.mkdir()
    asked = root / "scontrol_asked.txt"
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "SLURM_CONF=$SLURM_CONF $*" >> {asked}\n')
    (fake / "scontrol").chmod(0o755)
    path = workflow_copy.env["PATH"]
    workflow_copy.env["PATH"] = f"{fake}{os.pathsep}{path}"
    res = workflow_copy.run(tool("toolbox"), "plan", "results/tiny/")
    workflow_copy.env["PATH"] = path
    calls = asked.read_text().splitlines()
    assert calls and set(calls) == {f"SLURM_CONF={os.devnull} show config"}, calls
    for log in (root / "work/_defaults/logs/defaults.log", root / "work/tiny/logs/compose.log"):
        text = log.read_text()
        assert "| hydra" in text, text[-2000:]  # the imports were printed
        assert HEAVY.findall(text) == [], log
    assert "| yaml" in res.stderr and HEAVY.findall(res.stderr) == []  # toolbox plan itself
    table = res.stdout
    assert table.startswith("| run | stage | reason |")
    planned = {line.split(" | ")[1] for line in table.splitlines()[2:]}
    # compose ran inside plan (its outputs now exist), so the plan starts after it
    assert planned == {"data", "train", "eval", "check", "plot", "publish"}, table
    assert "| tiny | train |" in table and "Missing output files" in table
    assert (Path(workflow_copy.root) / "work/tiny/config/train.yaml").is_file()

    del workflow_copy.env["PYTHONPROFILEIMPORTTIME"]

    # composed already: the same plan (from one dry run); a changed run entry is composed again
    again = workflow_copy.run(tool("toolbox"), "plan", "results/tiny/").stdout
    assert {line.split(" | ")[1] for line in again.splitlines()[2:]} == planned  # reasons' order varies
    full = root / "work/tiny/config/full.yaml"
    assert "max_examples: 16" in full.read_text()
    cfg = tiny_config()
    cfg["runs"]["tiny"]["overrides"] = [
        o if not o.startswith("eval.exact_match.max_examples=") else "eval.exact_match.max_examples=8"
        for o in cfg["runs"]["tiny"]["overrides"]
    ]
    workflow_copy.write_config(cfg)
    workflow_copy.run(tool("toolbox"), "plan", "results/tiny/")
    assert "max_examples: 8" in full.read_text()


def test_plan_composes_only_the_runs_a_target_needs() -> None:
    """`toolbox plan results/demo/` composed every run of config/config.yaml (28 compose jobs, 3 min
    25 s in issue 38); it composes the target's run and the runs it starts from."""
    from toolbox.results.plan import target_runs

    runs = {
        "demo": {"experiment": "demo"},
        "sft": {"experiment": "sft_arith"},
        "grpo": {"experiment": "grpo_arith", "init_from": "sft"},
        "agent": {"experiment": "agent_tools"},
        "agent_sft": {"experiment": "agent_sft", "init_from": "grpo", "data_from_traces": "agent"},
    }
    assert target_runs(["results/demo/"], runs) == ["demo"]
    assert target_runs(["results/grpo"], runs) == ["grpo", "sft"]
    assert target_runs(["./work/agent_sft/eval.json"], runs) == ["agent", "agent_sft", "grpo", "sft"]
    assert target_runs(["results/demo/", "work/sft/train/model"], runs) == ["demo", "sft"]
    # the default target, or one that names no run: every run
    assert target_runs([], runs) == sorted(runs)
    assert target_runs(["results/tables/cora.md"], runs) == sorted(runs)
