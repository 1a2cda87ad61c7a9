"""toolbox bundle: one archive that unpacks into a pipeline Snakemake and DVC can run."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from workflow_copy import REPO, Workflow, tiny_config

from toolbox.bundle import make_bundle


def _unpack(archive: Path, dest: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        tar.extractall(dest, filter="tar")
    return names


def test_bundle_holds_the_pipeline_and_snakemake_plans_it(tmp_path):
    manifest = make_bundle(REPO, tmp_path / "pipeline.tar.gz")
    names = _unpack(tmp_path / "pipeline.tar.gz", tmp_path / "new")
    assert {
        "Snakefile",
        "dvc.yaml",
        "requirements.lock",
        "pyproject.toml",
        "Makefile",
        "config/config.yaml",
        "workflow/stages.py",
        "toolbox/cli.py",
        "BUNDLE.json",
    } <= names
    assert not any(n.startswith((".venv", "work/", "results/")) for n in names)
    assert manifest["files"] == len(names) - 1 and not manifest["with_data"]
    wf = Workflow(tmp_path / "new")
    planned = wf.ran(wf.snakemake("-n", "results/demo/").stdout)
    assert {"compose", "data", "train", "eval", "publish"} <= planned


@pytest.mark.slow
def test_bundle_with_data_reproduces_with_nothing_to_recompute(tmp_path):
    """A bundle unpacked with a fresh environment (its own `make install`) reproduces a run; bundled
    again with its data, the receiver's dvc repro has nothing to recompute."""
    make_bundle(REPO, tmp_path / "code.tar.gz")
    _unpack(tmp_path / "code.tar.gz", tmp_path / "a")
    a = Workflow(tmp_path / "a")
    a.run("make", "install", timeout=1800)  # the bundle's own pinned environment
    fresh = tmp_path / "a" / ".venv" / "bin"
    a.env["PATH"] = f"{fresh}{os.pathsep}{a.env['PATH']}"
    a.write_config(tiny_config())
    a.run("git", "init", "-q")
    a.run("git", "add", "-A")
    a.run("git", "commit", "-qm", "bundle")
    assert {"data-tiny", "train-tiny", "eval-tiny"} <= a.dvc_ran(a.run(str(fresh / "dvc"), "repro").stdout)
    a.run("git", "add", "-A")
    a.run("git", "commit", "-qm", "reproduced")

    manifest = make_bundle(tmp_path / "a", tmp_path / "full.tar.gz", with_data=True)
    assert manifest["with_data"] and manifest["has_dvc_lock"]
    names = _unpack(tmp_path / "full.tar.gz", tmp_path / "b")
    assert any(n.startswith("work/tiny/train/model/") for n in names)
    b = Workflow(tmp_path / "b")
    b.run("git", "init", "-q")
    b.run("git", "add", "-A")
    b.run("git", "commit", "-qm", "received")
    again = b.dvc("repro")
    assert not b.dvc_ran(again.stdout), again.stdout
    assert b.snakemake("-n", "results/tiny/").returncode == 0
    # DVC built these outputs, so Snakemake has no record of them: one --touch re-stamps them
    b.snakemake("-c1", "--touch", "results/tiny/")
    again = b.snakemake("-c2", "results/tiny/")
    assert "Nothing to be done" in again.stdout + again.stderr and b.ran(again.stdout + again.stderr) == set()


@pytest.mark.slow
def test_bundle_of_a_snakemake_run_recomputes_nothing_under_snakemake(tmp_path):
    """Built by Snakemake, bundled with its data (and .snakemake/metadata), unpacked elsewhere:
    `snakemake -c2` there has nothing to do."""
    from workflow_copy import copy_workflow

    wf = copy_workflow(tmp_path / "a")
    wf.run("git", "init", "-q")
    wf.snakemake("-c2", "results/tiny/")
    # the library too, as in a checkout (the bundle holds what git tracks)
    wf.run("git", "add", "-A")
    wf.run("git", "commit", "-qm", "built")
    manifest = make_bundle(wf.root, tmp_path / "full.tar.gz", with_data=True)
    names = _unpack(tmp_path / "full.tar.gz", tmp_path / "b")
    assert manifest["with_data"] and any(n.startswith(".snakemake/metadata/") for n in names)
    b = Workflow(tmp_path / "b")
    res = b.snakemake("-c2", "results/tiny/")
    assert "Nothing to be done" in res.stdout + res.stderr, res.stdout + res.stderr
    assert b.ran(res.stdout + res.stderr) == set()
