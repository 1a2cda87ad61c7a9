"""workflow/rules/*.smk are generated from workflow/stages.py: each rule shows its paths, and a stage
changed without regenerating fails (as dvc.yaml does)."""

from __future__ import annotations

import os
import re
import sys

from workflow_copy import REPO, Workflow

sys.path.insert(0, str(REPO / "workflow"))
import rule_files  # noqa: E402
import stages  # noqa: E402


def test_rule_files_are_generated_from_the_stages_and_up_to_date() -> None:
    assert rule_files.stale_rule_files() == [], "run: python workflow/generate.py"


def test_every_rule_file_shows_its_rules_paths() -> None:
    for stage in stages.STAGES:
        text = (REPO / "workflow" / "rules" / f"{stage.file}.smk").read_text()
        rule = text[text.index(f" {stage.name}:\n") :]
        assert "**" not in rule and "stage_input" not in rule
        for out in stage.outs.values():
            if out.snakemake:
                assert f'"{out.path}"' in rule, (stage.name, out.path)
        for key, dep in stage.deps.items():
            shown = f'"{rule_files.snakemake_input(dep)}"' in rule
            assert shown != (key in stage.dvc_only), (stage.name, dep)
        assert f'"{stage.log()}",' in rule
        shell = re.search(r"    shell:\n        \"(.*)\"\n", rule).group(1)
        # the command itself, not a parameter holding it
        assert shell.startswith(("( toolbox ", "( python ", "( mkdir ")) and "params.cmd" not in shell


def test_no_rule_has_a_message_so_each_job_shows_its_name_and_paths() -> None:
    """A ``message:`` replaces the job's ``rule <name>:`` block on the terminal (what a dry run shows
    and ``Workflow.ran`` reads), and does not change the failed-job report's ``message: None``."""
    for stage in stages.STAGES:
        text = rule_files.rule_text(stage)
        assert not re.search(r"^\s+message:", text, flags=re.M), stage.name
        assert f"rule {stage.name}:" in text or f"checkpoint {stage.name}:" in text


def test_a_stage_changed_without_regenerating_fails_the_check(workflow_copy: Workflow) -> None:
    ok = workflow_copy.run(sys.executable, "workflow/generate.py", "--check", check=False)
    assert ok.returncode == 0, ok.stderr
    path = workflow_copy.root / "workflow" / "stages.py"
    path.write_text(
        path.read_text().replace('"eval": "work/{run}/eval.json"', '"eval": "work/{run}/evaluation.json"')
    )
    stale = workflow_copy.run(sys.executable, "workflow/generate.py", "--check", check=False)
    assert stale.returncode == 1
    assert "workflow/rules/eval.smk is out of date" in stale.stderr, stale.stderr
    workflow_copy.run(sys.executable, "workflow/generate.py")
    assert '"work/{run}/evaluation.json"' in (workflow_copy.root / "workflow/rules/eval.smk").read_text()


def test_no_rule_is_special_cased_by_name_in_common_smk() -> None:
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    for stage in stages.STAGES:
        assert f'"{stage.name}"' not in common and f"'{stage.name}'" not in common, stage.name
    assert 'validate(config, "../schemas/config.schema.yaml"' in common


def test_compose_follows_the_config_tree_through_defaults(workflow_copy: Workflow) -> None:
    """compose does not declare the config tree to Snakemake (dvc_only: ~120 files on every compose
    job slowed the DAG); a changed config file still reruns it, through defaults."""
    (compose,) = [s for s in stages.STAGES if s.name == "compose"]
    assert compose.dvc_only == ("tree",) and compose.deps["tree"] == stages.CONFIG_TREE
    root = workflow_copy.root
    outputs = [stages.DEFAULTS] + [o.path.format(run="tiny") for o in compose.outs.values()]
    for path in outputs:  # compose's outputs, newer than the tree: up to date
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x: 1\n")
        os.utime(root / path, (2e9, 2e9))
    target = compose.outs["full"].path.format(run="tiny")
    before = workflow_copy.snakemake("-n", target)
    assert workflow_copy.ran(before.stdout) == set(), before.stdout
    os.utime(root / stages.CONFIG_TREE / "experiment" / "demo.yaml", (2e9 + 10, 2e9 + 10))
    after = workflow_copy.snakemake("-n", target)
    assert workflow_copy.ran(after.stdout) == {"defaults", "compose"}, after.stdout
    assert "toolbox/configs/experiment/demo.yaml" in after.stdout  # defaults' reason: an updated input
