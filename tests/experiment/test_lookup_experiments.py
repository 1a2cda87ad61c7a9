"""Experiments lookup_sft and lookup_grpo compose: lookup_sft trains on the lookup_tools source with
512 positions and runs the lookup_calculator environment's held-out episodes (env_episodes), which
a tiny build of it scores; lookup_grpo starts from its model, trains on the same environment, and
evaluates on the same held-out tasks."""

from __future__ import annotations

import contextlib
import io

import torch
import yaml

from toolbox.cli import main
from toolbox.experiment import ExperimentBuilder, load_config


def composed(*overrides: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["compose", *overrides])
    return yaml.safe_load(out.getvalue())


def test_lookup_sft_and_lookup_grpo_compose_on_the_same_held_out_tasks():
    sft, grpo = composed("experiment=lookup_sft"), composed("experiment=lookup_grpo")
    assert sft["data"]["source"]["name"] == grpo["data"]["source"]["name"] == "lookup_tools"
    held_out = ("num_test", "digits", "fixed_width", "seed")
    assert [sft["data"]["source"][k] for k in held_out] == [grpo["data"]["source"][k] for k in held_out]
    assert (sft["data"]["dataset"]["name"], sft["model"]["max_position_embeddings"]) == ("chat", 512)
    assert sft["eval"]["env_episodes"]["env"]["name"] == "lookup_calculator"
    assert (grpo["trainer"]["name"], grpo["trainer"]["env"]["name"]) == ("agent_grpo", "lookup_calculator")
    assert grpo["model"] == {"name": "pretrained", "path": "results/lookup_sft/model", "dtype": "float32",
                             "quantization": None, "max_position_embeddings": None}  # fmt: skip
    assert grpo["eval"]["env_episodes"]["env"] is None  # the trainer's environment
    assert grpo["eval"]["perplexity"] is None


def test_a_tiny_lookup_sft_builds_and_scores_its_episodes(tmp_path):
    torch.manual_seed(0)
    overrides = ["experiment=lookup_sft", "data.source.num_train=40", "data.source.num_test=3",
                 "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=64",
                 "tokenizer.vocab_size=300", "callbacks=none", "device=cpu",
                 "eval.env_episodes.max_reply_tokens=8", f"run_dir={tmp_path}"]  # fmt: skip
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    assert parts.model.config.max_position_embeddings == 512
    evaluator = parts.evaluators[-1]
    with torch.no_grad():
        metrics = evaluator(parts)
    assert set(metrics) == {"eval/reward", "eval/correct", "eval/looked_up", "eval/computed"}
    assert [e.task["expression"] for e in evaluator.last_episodes] == [
        r["expression"] for r in parts.splits.test
    ]
