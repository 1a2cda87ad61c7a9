"""The agent -> traces -> dataset stages: only for runs with `agent:`, and a run with
`data_from_traces` trains on the dataset (fast: stage definitions and a dry run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from workflow_copy import REPO, copy_workflow, tiny_config

sys.path.insert(0, str(REPO / "workflow"))
import dvc_yaml  # noqa: E402
import run_config  # noqa: E402
import runs  # noqa: E402


def agent_config() -> dict:
    cfg = tiny_config()
    cfg["runs"]["actor"] = {
        **cfg["runs"]["tiny"],
        "agent": {"script": "agent.py", "args": ["--problems", 50]},
        "to_dataset": ["--format", "sft", "--where", "correct==true"],
    }
    cfg["runs"]["learner"] = {
        "experiment": "agent_sft", "init_from": "actor", "data_from_traces": "actor",
        "agent": {"script": "agent.py", "args": ["--train-problems", 0]},
    }  # fmt: skip
    return cfg


def test_agent_and_traces_stages_exist_only_for_runs_with_an_agent() -> None:
    cfg = agent_config()
    assert run_config.config_errors(cfg) == []
    dvc = dvc_yaml.dvc_stages(cfg["runs"])["stages"]
    assert {"agent-actor", "traces-actor"} <= dvc.keys()
    assert not {"agent-tiny", "traces-tiny", "traces-learner"} & dvc.keys()
    # the learner's agent evaluates it and the model it started from (before / after)
    assert "--before-model work/actor/train/model --train-problems 0" in dvc["agent-learner"]["cmd"]
    assert "work/actor/train/model" in dvc["agent-learner"]["deps"]
    assert dvc["agent-actor"]["cmd"].endswith(
        "( python agent.py --model work/actor/train/model --traces work/actor/traces.sqlite "
        "--eval work/actor/agent_eval.json --problems 50 ) 3>&2 > work/actor/logs/agent.log 2>&1"
    )
    assert "agent.py" in dvc["agent-actor"]["deps"] and dvc["agent-actor"]["metrics"] == [
        "work/actor/agent_eval.json"
    ]
    assert (
        "toolbox traces to-dataset work/actor/traces.sqlite --out work/actor/traces_data --no-progress --format sft --where correct==true"
        in dvc["traces-actor"]["cmd"]
    )
    assert "work/actor/traces_data" in dvc["data-learner"]["deps"]
    assert "work/actor/agent_eval.json" in dvc["publish-actor"]["deps"]
    assert "--extra work/actor/agent_eval.json" in dvc["publish-actor"]["cmd"]
    assert "--extra" not in dvc["publish-tiny"]["cmd"]
    over = runs.overrides("learner", cfg["runs"]["learner"])
    assert over[6:9] == ["data=local", "data.source.path=work/actor/traces_data", "data.dataset.name=chat"]


def test_data_from_traces_must_name_a_run_with_an_agent() -> None:
    cfg = agent_config()
    cfg["runs"]["learner"]["data_from_traces"] = "tiny"
    assert run_config.config_errors(cfg) == [
        "runs.learner.data_from_traces: 'tiny' is not a run of this file with an agent and to_dataset "
        "(runs with both: actor)"
    ]


def test_dry_run_of_the_learner_runs_the_whole_loop(tmp_path: Path) -> None:
    wf = copy_workflow(tmp_path / "repo", agent_config())
    (wf.root / "agent.py").write_text("# agent\n")
    # compose is a checkpoint: the jobs after it are known once it has run
    wf.snakemake("-c2", "work/actor/config/full.yaml", "work/learner/config/full.yaml")
    out = wf.snakemake("-n", "results/learner/").stdout
    for rule, count in (("agent", 2), ("traces", 1), ("train", 2), ("data", 2), ("publish", 1)):
        assert re.search(rf"^{rule}\s+{count}$", out, flags=re.M), (rule, out)
