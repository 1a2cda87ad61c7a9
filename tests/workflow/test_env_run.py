"""An environment run (ppo_env) in the workflow: its slices, and its stages' commands end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))
import slice_config  # noqa: E402

DEFAULTS = {
    "seed": 0,
    "data": {"source": {"name": "arithmetic"}},
    "eval": {"perplexity": {"name": "perplexity"}},
    "env": None,
}
ENV_RUN = {
    "seed": 1,
    "data": None,
    "env": {"name": "gym", "id": "CartPole-v1"},
    "trainer": {"name": "ppo_env"},
    "eval": {"episodes": {"name": "episodes"}},
}


def test_env_run_trains_without_evaluators_and_evaluates_its_own_episodes():
    train = slice_config.slice_config(ENV_RUN, DEFAULTS, "train")
    evaluation = slice_config.slice_config(ENV_RUN, DEFAULTS, "eval")
    assert train["eval"] is None and train["env"] == ENV_RUN["env"]
    assert evaluation["eval"] == ENV_RUN["eval"] and evaluation["env"] == ENV_RUN["env"]
    data_run = {**ENV_RUN, "env": None, "data": DEFAULTS["data"]}  # a data run keeps the default eval
    assert slice_config.slice_config(data_run, DEFAULTS, "train")["eval"] == DEFAULTS["eval"]
    # agent_grpo's text environment (trainer.env): its prompt-only tasks have no reference
    # completion for the default perplexity (training failed at its first in-training eval)
    text_env = {**data_run, "trainer": {"name": "agent_grpo", "env": {"name": "calculator"}},
                "eval": {"perplexity": None, "tool_calls": {"name": "tool_calls"}}}  # fmt: skip
    assert slice_config.slice_config(text_env, DEFAULTS, "train")["eval"] is None
    assert slice_config.slice_config(text_env, DEFAULTS, "eval")["eval"] == text_env["eval"]


@pytest.mark.slow
def test_env_run_stage_commands_end_to_end(tmp_path):
    """compose → slice → data → train → eval → plot, as workflow/stages.py runs them, 3 iterations."""

    def run(*cmd):
        subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, text=True)

    w = tmp_path
    run("toolbox", "compose", "--out", str(w / "defaults.yaml"))
    run(
        "toolbox", "compose", "experiment=ppo_cartpole", f"run_dir={w / 'train'}", "trainer.max_steps=3",
        "--out", str(w / "config" / "full.yaml"),
    )  # fmt: skip
    run(sys.executable, "workflow/scripts/slice_config.py", str(w / "config" / "full.yaml"),
        "--defaults", str(w / "defaults.yaml"), "--out-dir", str(w / "config"))  # fmt: skip
    assert yaml.safe_load((w / "config" / "train.yaml").read_text())["eval"] is None
    run("toolbox", "data", "--config", str(w / "config" / "data.yaml"), "--out", str(w / "data"))
    assert (w / "data" / "train.jsonl").read_text() == ""
    run("toolbox", "train", "--config", str(w / "config" / "train.yaml"), "--data", str(w / "data"),
        "--out", str(w / "train"), "resume_from=auto")  # fmt: skip
    assert json.loads((w / "train" / "model" / "config.json").read_text())["model_type"] == "actor_critic"
    run("toolbox", "eval", "--config", str(w / "config" / "eval.yaml"), "--data", str(w / "data"),
        "--model", str(w / "train" / "model"), "--out", str(w / "eval.json"))  # fmt: skip
    scores = json.loads((w / "eval.json").read_text())
    assert set(scores) == {
        "eval/return_mean",
        "eval/return_std",
        "eval/return_min",
        "eval/return_max",
        "eval/length_mean",
    }
    assert 8 <= scores["eval/return_mean"] <= 500
    run("toolbox", "plot", str(w / "train"), "--out", str(w / "plots"))
    assert (w / "plots" / "return_mean.png").is_file()
