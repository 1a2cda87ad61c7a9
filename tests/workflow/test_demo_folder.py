"""`make demo` (`toolbox demo`) and the workflow's run `demo` write distinct folders (issue 38):
the workflow publishes into results/<run>/ and Snakemake and DVC own it, so the demo trains into
outputs/demo/ and a `snakemake -n results/demo/` after `make demo` still lists every job."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from toolbox.experiment import load_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "workflow"))

from stages import PATHS  # noqa: E402


def test_make_demo_and_the_workflow_write_distinct_folders():
    make_demo = "\n".join(
        line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")
    )
    assert "toolbox demo" in make_demo  # make demo is toolbox demo, i.e. experiment=demo's run_dir
    runs = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["runs"]
    published = {PATHS["results"].format(run=run) for run in runs}
    assert "results/demo" in published
    demo_dir = str(load_config(["experiment=demo"]).run_dir)
    assert demo_dir == "outputs/demo"
    assert demo_dir not in published
    assert not demo_dir.startswith("work/")  # nor any stage's folder


def test_no_experiment_trains_into_a_workflow_runs_folder():
    """The workflow's runs agent_sft, decision_intent_sft, decision_intent and ppo_cartpole share
    their experiment's name: `toolbox train experiment=X` outside the workflow wrote into the folder
    the workflow publishes (results/X/). Every experiment's default run_dir is now no run's folder,
    published or working."""
    runs = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["runs"]
    published = {PATHS["results"].format(run=run) for run in runs}
    experiments = sorted(p.stem for p in (ROOT / "toolbox" / "configs" / "experiment").glob("*.yaml"))
    assert {"agent_sft", "decision_intent_sft", "decision_intent", "ppo_cartpole"} <= set(experiments)
    clashes = {}
    for name in experiments:
        run_dir = str(load_config([f"experiment={name}"]).run_dir).rstrip("/")
        if run_dir in published or run_dir.startswith("work/"):
            clashes[name] = run_dir
    assert clashes == {}
    assert str(load_config(["experiment=ppo_cartpole"]).run_dir) == "outputs/ppo_cartpole"
