"""The agent_grpo trainer on a tiny Llama: a one-turn environment gives the grpo trainer's round bit
for bit; every loss type trains on multi-turn episodes; no environment token gets gradient; the
episodes' traces load in ``toolbox traces show`` and ``to-dataset`` gives a dataset SFT trains on."""

from __future__ import annotations

import itertools
import json
import time

import pytest
import torch

from tests.rl.conftest import ScriptedEngine, solve
from toolbox.core.events import Event
from toolbox.core.registries import REWARDS, TEXT_ENVS
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.objectives.policy import LOSS_TYPES, PolicyBatch
from toolbox.rl.text_env import Opening, Step, TextEnv

torch.set_num_threads(1)

SMALL = ["model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
         "callbacks=none", "eval=none", "device=cpu", "objective=grpo", "trainer.eval_every=0",
         "trainer.save_every=0", "trainer.prompts_per_step=2", "trainer.num_generations=3"]  # fmt: skip
AGENT = [*SMALL, "data=arithmetic_tools", "data.source.num_train=32", "data.source.num_test=4",
         "data.source.digits=2", "data.source.fixed_width=true", "data.source.templates=3",
         "data.dataset.name=prompt_only", "+data.dataset.prompt_field=question",
         "model.max_position_embeddings=1024", "trainer=agent_grpo", "trainer.max_reply_tokens=96",
         "++trainer.env.max_tokens=600"]  # fmt: skip


@TEXT_ENVS.register("_test_one_turn_digit")
class OneTurnDigit(TextEnv):
    """One reply to the record's prompt, rewarded 1 when it starts with a digit."""

    def reset(self, task):
        return Opening([{"role": "user", "content": task["prompt"]}])

    def step(self, message):
        return Step(done=True, reward=float(message["content"][:1].isdigit()))


@REWARDS.register("_test_agent_first_digit")
def _first_digit(**_):
    def score(prompts, completions, **fields):
        return [float(c[:1].isdigit()) for c in completions]

    return score


def build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def test_one_turn_environment_is_the_grpo_round_bit_for_bit(tmp_path):
    common = [*SMALL, "data.dataset.name=prompt_only", "data.source.num_train=32", "optimizer.lr=1e-2",
              "trainer.temperature=1.5"]  # fmt: skip
    grpo = build([*common, "trainer=grpo", "trainer.max_completion_length=8", f"run_dir={tmp_path}/g",
                  "~trainer.rewards", "+trainer.rewards.d={name: _test_agent_first_digit}"])  # fmt: skip
    agent = build([*common, "trainer=agent_grpo", "trainer.env.name=_test_one_turn_digit", "++trainer.env.max_tokens=8",
                   "trainer.max_reply_tokens=8", f"run_dir={tmp_path}/a"])  # fmt: skip
    chat = agent.trainer.runner.chat  # the GRPO trainer asks with the same chat-rendered prompts
    grpo.trainer._prompt_ids = lambda ex: chat.encode(
        chat.render([{"role": "user", "content": ex["prompt"]}], add_generation_prompt=True)
    )
    rollouts, metrics = [], []
    for parts in (grpo, agent):
        parts.trainer.bus.subscribe(Event.ROLLOUT_END, lambda d: rollouts.append(d.payload["rollout"]))
        metrics.append(parts.trainer.train_step())
        parts.trainer.teardown()
    g, a = rollouts
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "rewards", "advantages"):
        assert torch.equal(getattr(g, name), getattr(a, name)), name
    assert g.completions == a.completions and g.finish_reasons == a.finish_reasons
    assert float(g.rewards.std()) > 0  # the round has a gradient to compare
    assert metrics[0]["loss"] == metrics[1]["loss"] and metrics[0]["grad_norm"] == metrics[1]["grad_norm"]
    for (n, p), (_, q) in zip(grpo.model.named_parameters(), agent.model.named_parameters(), strict=True):
        assert torch.equal(p, q), n


def test_a_waves_round_does_not_depend_on_when_its_requests_reach_the_engine(tmp_path, monkeypatch):
    """A wave's requests join one engine step: were the engine thread to start the first before the
    others arrive (a busy machine), the batch's rows, and so the sampling log-probs, would differ."""
    parts = build([*SMALL, "data.dataset.name=prompt_only", "data.source.num_train=32", "trainer=agent_grpo",
                   "trainer.env.name=_test_one_turn_digit", "++trainer.env.max_tokens=8",
                   "trainer.max_reply_tokens=8", "trainer.temperature=1.5", f"run_dir={tmp_path}"])  # fmt: skip
    trainer = parts.trainer
    batch = trainer.loader.next_batch()
    together = trainer.rollout(batch, round_index=0)
    submit = trainer.runner.engine.batcher.submit

    def slow_submit(*args, **kwargs):
        handle = submit(*args, **kwargs)
        time.sleep(0.05)  # the engine thread runs before the next request arrives
        return handle

    monkeypatch.setattr(trainer.runner.engine.batcher, "submit", slow_submit)
    late = trainer.rollout(batch, round_index=0)
    trainer.teardown()
    assert torch.equal(together.completion_ids, late.completion_ids)
    assert torch.equal(together.sampling_logprobs, late.sampling_logprobs)


_answers = itertools.count()


def half_right(prompt: str) -> str:
    """The scripted agent, but every other final answer it gives is wrong (so a group's rewards differ)."""
    reply = solve(prompt)
    if reply.startswith("The answer") and next(_answers) % 2:
        return "The answer is 1."
    return reply


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    run = tmp_path_factory.mktemp("agent")
    parts = build([*AGENT, "trainer.env.name=lookup_calculator", f"run_dir={run}"])
    parts.trainer.runner.engine = ScriptedEngine(parts.tokenizer, policy=half_right)
    yield parts
    parts.trainer.teardown()


def test_no_environment_token_gets_gradient(scripted):
    trainer = scripted.trainer
    rollout = trainer.rollout(trainer.loader.next_batch())
    trainer.score(rollout)
    assert float(rollout.rewards.std()) > 0
    mask = rollout.completion_mask.bool()
    env_tokens = (~mask) & (
        torch.arange(rollout.completion_width)[None] < rollout.completion_lengths[:, None]
    )
    assert env_tokens.sum() > 50 and mask.sum() > 50  # tool replies and generation prompts, and replies
    trainer.model.zero_grad()
    logps, _ = trainer._logps(trainer.model, rollout, False)
    logps.retain_grad()
    out = trainer.objective(PolicyBatch(logps, rollout.completion_mask, rollout.advantages))
    (out.loss_sum / out.num_items).backward()
    assert bool((logps.grad[env_tokens] == 0).all())
    assert bool((logps.grad[mask] != 0).any())


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_trains_on_episodes(scripted, loss_type):
    trainer = scripted.trainer
    trainer.objective.loss_type = loss_type
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train_step()
    trainer.step += 1
    assert metrics["episodes/turns_mean"] == 3 and metrics["episodes/tool_calls_mean"] == 2
    assert 0 < metrics["reward"] < 1 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert metrics["grad_norm"] > 0
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True))


def test_traces_show_and_to_dataset_train(scripted, tmp_path, capsys):
    from toolbox.cli import main
    from toolbox.tracing import open_store

    trainer = scripted.trainer
    trainer.train_step()
    trainer.tracer.flush()
    path = trainer.context.run_dir / "traces.sqlite"
    store = open_store(path)
    roots = [r for r in store.query() if r.kind == "agent"]
    assert roots and {s.name for s in roots[0].scores} >= {"reward", "correct", "looked_up"}
    kinds = sorted(r.kind for r in store.query() if r.trace_id == roots[0].trace_id)
    assert kinds == ["agent", *["decision"] * 3, *["llm_call"] * 3, *["tool_call"] * 2]
    store.close()
    main(["traces", "show", str(path), roots[0].trace_id])
    shown = capsys.readouterr().out
    assert "lookup" in shown and "calculator" in shown and "llm_call" in shown
    out = tmp_path / "sft"
    main(
        ["traces", "to-dataset", str(path), "--format", "sft", "--out", str(out), "--where", "correct==true"]
    )
    from datasets import load_from_disk

    rows = load_from_disk(str(out))
    row = next(iter(rows.values()))[0] if hasattr(rows, "values") else rows[0]
    messages = row["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert json.loads(row["tools"])[0]["function"]["name"] == "lookup"
    sft = build([*SMALL[:4], "callbacks=none", "eval=none", "device=cpu", "data=local",
                 # no test split: the dataset's is by session hash, and the scripted trainer (shared
                 # by this module's tests) may have traced only one step's rows by now, all in train
                 f"data.source.path={out}", "data.source.test=null", "data.dataset.name=chat",
                 "data.dataset.max_length=1024",
                 "model.max_position_embeddings=1024", "trainer.max_steps=3", "trainer.batch_size=2",
                 f"run_dir={tmp_path}/sft"])  # fmt: skip
    result = sft.trainer.fit()
    assert sft.trainer.step == 3 and result is not None


def test_resume_equals_uninterrupted(tmp_path):
    """Two rounds, then two more from the checkpoint, equal four uninterrupted (tasks, sampling seeds
    and the environment are functions of the step and the record: nothing else to restore)."""
    common = [*SMALL, "data.dataset.name=prompt_only", "data.source.num_train=32", "optimizer.lr=1e-2",
              "trainer.temperature=1.5", "trainer=agent_grpo", "trainer.env.name=_test_one_turn_digit",
              "++trainer.env.max_tokens=8", "trainer.max_reply_tokens=8", "trainer.max_steps=4"]  # fmt: skip
    full = build([*common, f"run_dir={tmp_path / 'full'}"])
    full.trainer.fit()
    first = build([*common, f"run_dir={tmp_path / 'split'}", "trainer.max_steps=2"])
    first.trainer.fit()
    second = build([*common, f"run_dir={tmp_path / 'split'}", "resume_from=auto"])
    second.trainer.fit()
    assert second.trainer.step == 4
    for (n, a), b in zip(full.model.named_parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b), n
    assert any(
        not torch.equal(a, b) for a, b in zip(full.model.parameters(), first.model.parameters(), strict=True)
    )


def test_agent_grpo_experiment_runs_end_to_end_at_tiny_scale(tmp_path):
    """experiment=agent_grpo from a saved model (a random tiny one here, as agent_sft's would be):
    one round, the tool_calls evaluator at the end, the episodes traced in the run folder."""
    start = build([*AGENT, f"run_dir={tmp_path / 'start'}"])
    start.model.save_pretrained(tmp_path / "model")
    start.tokenizer.save_pretrained(tmp_path / "model")
    start.trainer.teardown()
    run = build(["experiment=agent_grpo", f"model.path={tmp_path / 'model'}", f"tokenizer.path={tmp_path / 'model'}",
                 "device=cpu", "callbacks=none", "data.source.num_train=32", "data.source.num_test=4",
                 "trainer.max_steps=1", "trainer.prompts_per_step=2", "trainer.num_generations=2",
                 "trainer.max_reply_tokens=8", "eval.tool_calls.max_examples=2",
                 "eval.tool_calls.max_new_tokens=8", f"run_dir={tmp_path / 'run'}"])  # fmt: skip
    metrics = run.trainer.fit()
    assert run.trainer.step == 1 and "eval/tool_call_success" in metrics
    assert (tmp_path / "run" / "traces.sqlite").is_file()


def test_async_episodes_max_staleness_zero_is_bit_for_bit_and_one_resumes_bitwise(tmp_path):
    """trainer.max_staleness on episodes: 0 equals the synchronous trainer bit for bit; with 1 the
    rounds after the first lag one update, and a run stopped at step 2 (its checkpoint holding
    round 2, generated by the policy of step 1) resumes to the uninterrupted run's weights."""
    common = [*SMALL, "data.dataset.name=prompt_only", "data.source.num_train=32", "optimizer.lr=1e-2",
              "trainer.temperature=1.5", "trainer=agent_grpo", "trainer.env.name=_test_one_turn_digit",
              "++trainer.env.max_tokens=8", "trainer.max_reply_tokens=8", "trainer.max_steps=4",
              "scheduler.warmup_steps=0"]  # fmt: skip

    def fit(overrides):
        parts = build(overrides)
        seen = []
        parts.trainer.bus.subscribe(Event.STEP_END, lambda d: seen.append(d.metrics))
        parts.trainer.fit()
        return parts, seen

    sync, sync_m = fit([*common, f"run_dir={tmp_path / 'sync'}"])
    zero, zero_m = fit([*common, f"run_dir={tmp_path / 'zero'}", "trainer.max_staleness=0"])
    assert [m["loss"] for m in zero_m] == [m["loss"] for m in sync_m]
    for (n, a), b in zip(sync.model.named_parameters(), zero.model.parameters(), strict=True):
        assert torch.equal(a, b), n
    one, one_m = fit([*common, f"run_dir={tmp_path / 'one'}", "trainer.max_staleness=1"])
    assert [m["async/staleness"] for m in one_m] == [0.0, 1.0, 1.0, 1.0]
    assert any(
        not torch.equal(a, b) for a, b in zip(one.model.parameters(), sync.model.parameters(), strict=True)
    )
    split = [*common, f"run_dir={tmp_path / 'split'}", "trainer.max_staleness=1"]
    first = build(split)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 2 and d.trainer.request_stop("test"))
    first.trainer.fit()
    second, _ = fit([*split, "resume_from=auto"])
    assert second.trainer.step == 4
    for (n, a), b in zip(one.model.named_parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b), n


KILLED_CHILD = """
import json, os, signal, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
import test_agent_grpo  # registers the test environment
from toolbox.core.events import Event
parts = test_agent_grpo.build(json.loads(sys.argv[1]))
def kill(data):
    if data.step == 3:  # round 3 is done and traced, its weights not saved: no cleanup of any kind
        os.kill(os.getpid(), signal.SIGKILL)
parts.trainer.bus.subscribe(Event.STEP_END, kill)
parts.trainer.fit()
"""


def test_sigkill_then_resume_gives_bitwise_weights_and_each_round_traced_once(tmp_path):
    """A run killed by SIGKILL after round 3 (checkpoint at 2), resumed, equals the uninterrupted
    run bit for bit; the killed process's trace of round 3 is replaced, not doubled."""
    import subprocess
    import sys
    from pathlib import Path

    from toolbox.tracing import open_store

    common = [*SMALL, "data.dataset.name=prompt_only", "data.source.num_train=32", "optimizer.lr=1e-2",
              "trainer.temperature=1.5", "trainer=agent_grpo", "trainer.env.name=_test_one_turn_digit",
              "++trainer.env.max_tokens=8", "trainer.max_reply_tokens=8", "trainer.max_steps=4",
              "trainer.save_every=2"]  # fmt: skip
    full = build([*common, f"run_dir={tmp_path / 'full'}"])
    full.trainer.fit()
    here = Path(__file__).resolve().parent
    script = tmp_path / "killed.py"
    script.write_text(KILLED_CHILD.format(root=str(here.parents[1]), tests=str(here)))
    run = tmp_path / "killed"
    child = subprocess.run(
        [sys.executable, str(script), json.dumps([*common, f"run_dir={run}"])],
        capture_output=True,
        timeout=600,
    )
    assert child.returncode == -9, child.stderr.decode()[-2000:]

    def rounds() -> dict[int, int]:
        with open_store(run / "traces.sqlite") as store:
            steps = [r.metadata["step"] for r in store.query() if r.kind == "agent"]
        return {s: steps.count(s) for s in sorted(set(steps))}

    assert rounds() == {1: 6, 2: 6, 3: 6}  # round 3 recorded by the killed process
    resumed = build([*common, f"run_dir={run}", "resume_from=auto"])
    resumed.trainer.fit()
    assert resumed.trainer.step == 4
    for (n, a), b in zip(full.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), n
    assert rounds() == {1: 6, 2: 6, 3: 6, 4: 6}  # round 3 once: the killed process's copy removed
