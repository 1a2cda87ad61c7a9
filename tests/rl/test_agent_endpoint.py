"""An agent written against the OpenAI API trains through the endpoint the trainer serves:
examples/agent_tools/agent.py, unchanged but for its base URL (``--base-url``), runs against the
agent_endpoint_grpo trainer's loopback endpoint; its model calls become the round's episodes (the
tool replies masked), its own trace's ``correct`` score their reward, and a step trains."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
import torch

from tests.rl.conftest import ScriptedEngine, solve
from toolbox.core.errors import ConfigError
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.rl.agent_endpoint import AgentEndpoint

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
AGENT_PY = str(ROOT / "examples" / "agent_tools" / "agent.py")
COMMAND = [sys.executable, AGENT_PY, "--base-url", "{base_url}", "--traces", "{traces}",
           "--eval", "{folder}/eval{run}.json", "--train-problems", "{tasks}", "--eval-problems", "0",
           "--seed", "{seed}", "--temperature", "1.0", "--digits", "2", "--fixed-width",
           "--templates", "3"]  # fmt: skip
SETTINGS = ["model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
            "callbacks=none", "eval=none", "device=cpu", "objective=grpo", "trainer.eval_every=0",
            "trainer.save_every=0", "trainer.prompts_per_step=2", "trainer.num_generations=2",
            "data=arithmetic_tools", "data.source.num_train=32", "data.source.num_test=4",
            "data.source.digits=2", "data.source.fixed_width=true", "data.source.templates=3",
            "data.dataset.name=prompt_only", "+data.dataset.prompt_field=question",
            "model.max_position_embeddings=1024", "trainer=agent_endpoint_grpo",
            "trainer.max_tokens=600", "trainer.timeout_s=300", "optimizer.lr=1e-2", "tokenizer=bpe"]  # fmt: skip

_answers: dict[str, itertools.count] = {}


def half_right(prompt: str) -> str:
    """The scripted agent, every other final answer to a question wrong (a task's two episodes in a
    round: one right, one wrong, whichever program asks first)."""
    reply = solve(prompt)
    if (
        reply.startswith("The answer")
        and next(_answers.setdefault(prompt.split("<|tool|>")[0], itertools.count())) % 2
    ):
        return "The answer is 1."
    return reply


def build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


@pytest.fixture
def agent_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_agent_py_trains_through_the_endpoint_with_only_its_base_url(tmp_path, agent_env, capsys):
    from toolbox.cli import main
    from toolbox.tracing import open_store

    parts = build([*SETTINGS, f"run_dir={tmp_path}", f"trainer.command={COMMAND}".replace("'", '"')])
    trainer = parts.trainer
    # the endpoint serves a scripted engine (the agent's right calls, half its answers wrong); the
    # model trained is the tiny Llama, on the tokens the endpoint recorded
    trainer.endpoint = AgentEndpoint(ScriptedEngine(parts.tokenizer, policy=half_right), "agent")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    try:
        rollout = trainer.rollout(trainer.loader.next_batch())
        episodes = trainer.last_episodes
        assert len(episodes) == 4 and [e.group for e in episodes] == [0, 0, 1, 1]
        assert [e.index for e in episodes] == [0, 1, 0, 1]  # one episode per agent program per task
        assert all(len(e.turns) == 2 and e.turns[0].message.get("tool_calls") for e in episodes)
        assert trainer.unchained == 0  # every call extended the tokens of the one before
        # the reward is the agent's own trace score: right answers 1, the scripted wrong ones 0
        for e in episodes:
            assert e.reward == float(e.turns[-1].text.split()[-1].rstrip(".") != "1")
        assert sorted(e.reward for e in episodes) == [0.0, 0.0, 1.0, 1.0]
        # tool replies and generation prompts are masked; the model's replies are not
        e = episodes[0]
        mask = rollout.completion_mask[0, : len(e.ids)].tolist()
        assert mask == e.mask and 0 in mask and mask[0] == 1 and mask[-1] == 1
        masked = parts.tokenizer.decode([t for t, m in zip(e.ids, e.mask, strict=True) if not m])
        tool_reply = e.messages[2]["content"]
        assert e.messages[2]["role"] == "tool" and tool_reply in masked and "<tool_call>" not in masked
        trained = parts.tokenizer.decode([t for t, m in zip(e.ids, e.mask, strict=True) if m])
        assert trained == "".join(f"{t.text}<|eos|>" for t in e.turns)  # the two replies, as sampled
        trainer.endpoint.recorder.take()
        metrics = trainer.train_step()  # a whole step: rollout through agent.py again, then the update
        assert metrics["episodes/groups"] == 2 and metrics["episodes/scored"] == 1.0
        assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True))
        trainer.step += 1
    finally:
        trainer.teardown()
    assert trainer.endpoint is None
    # every episode traced into the run folder; the agent's own traces beside them, per program
    assert (tmp_path / "agent_runs" / "step1" / "run1.sqlite").is_file()
    with open_store(tmp_path / "traces.sqlite") as store:
        roots = [r for r in store.query() if r.kind == "agent"]
        assert len(roots) == 8 and {r.score("reward").value for r in roots} == {0.0, 1.0}
        kinds = sorted(r.kind for r in store.query() if r.trace_id == roots[0].trace_id)
    assert kinds == ["agent", *["decision"] * 2, *["llm_call"] * 2, "tool_call"]
    main(["traces", "show", str(tmp_path / "traces.sqlite"), roots[0].trace_id])
    shown = capsys.readouterr().out
    assert "calculator" in shown and "llm_call" in shown


def test_agent_program_failure_names_its_log(tmp_path, agent_env):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('no endpoint here')\nsys.exit(3)\n")
    command = [sys.executable, str(script)]
    parts = build([*SETTINGS, f"run_dir={tmp_path}", f"trainer.command={command}".replace("'", '"')])
    try:
        with pytest.raises(Exception, match=r"agent program 0 exited with 3; see .*run0\.log"):
            parts.trainer.rollout(parts.trainer.loader.next_batch())
        assert "no endpoint here" in (tmp_path / "agent_runs" / "step1" / "run0.log").read_text()
    finally:
        parts.trainer.teardown()


def test_agent_program_past_its_timeout_is_stopped(tmp_path, agent_env):
    script = tmp_path / "hangs.py"
    script.write_text("import time\ntime.sleep(600)\n")
    command = [sys.executable, str(script)]
    parts = build([*SETTINGS, f"run_dir={tmp_path}", f"trainer.command={command}".replace("'", '"'),
                   "trainer.timeout_s=2"])  # fmt: skip
    try:
        with pytest.raises(Exception, match=r"ran past trainer.timeout_s=2 s and was stopped"):
            parts.trainer.rollout(parts.trainer.loader.next_batch())
    finally:
        parts.trainer.teardown()


def test_missing_command_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.command: the agent program to run"):
        build([*SETTINGS, f"run_dir={tmp_path}"])


def test_an_unknown_placeholder_or_program_is_a_one_line_error(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"trainer.command: '--url=\{base\}' names \{base\}; the placeholders are \{base_url\}",
    ):
        build([*SETTINGS, f"run_dir={tmp_path}", "trainer.command=[agent, '--url={base}']"])
    parts = build([*SETTINGS, f"run_dir={tmp_path}", f"trainer.command=[{tmp_path}/no_such_agent]"])
    try:
        with pytest.raises(Exception, match=r"cannot start '.*no_such_agent': No such file or directory"):
            parts.trainer.rollout(parts.trainer.loader.next_batch())
    finally:
        parts.trainer.teardown()


def test_agent_endpoint_grpo_experiment_runs_agent_py_at_tiny_scale(tmp_path, agent_env, monkeypatch):
    """experiment=agent_endpoint_grpo from a saved model (a random tiny one here, as agent_sft's
    would be): one round of agent.py through the endpoint, the tool_calls evaluator at the end."""
    monkeypatch.chdir(ROOT)  # the experiment names examples/agent_tools/agent.py from the checkout
    start = build([*SETTINGS, f"run_dir={tmp_path / 'start'}", "trainer.command=[x]"])
    start.model.save_pretrained(tmp_path / "model")
    start.tokenizer.save_pretrained(tmp_path / "model")
    start.trainer.teardown()
    run = build(["experiment=agent_endpoint_grpo", f"model.path={tmp_path / 'model'}",
                 f"tokenizer.path={tmp_path / 'model'}", "device=cpu", "callbacks=none",
                 "data.source.num_train=32", "data.source.num_test=4", "trainer.max_steps=1",
                 "trainer.prompts_per_step=2", "trainer.num_generations=2", "eval.tool_calls.max_examples=2",
                 "eval.tool_calls.max_new_tokens=8", f"run_dir={tmp_path / 'run'}"])  # fmt: skip
    metrics = run.trainer.fit()
    assert run.trainer.step == 1 and "eval/tool_call_success" in metrics
    assert sorted(p.name for p in (tmp_path / "run" / "agent_runs" / "step1").glob("run*.sqlite")) == [
        "run0.sqlite",
        "run1.sqlite",
    ]
    assert (tmp_path / "run" / "traces.sqlite").is_file()
