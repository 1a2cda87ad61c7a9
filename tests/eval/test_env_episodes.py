"""The ``env_episodes`` evaluator: greedy episodes of a text environment on the held-out records,
scored by it. A scripted policy (right, wrong-call, wrong-answer and no-call episodes) gives the
scores it should on the lookup task; on the calculator task the same policy, and a tiny random
Llama, give the ``tool_calls`` evaluator's numbers (and, for the Llama, its replies)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from tests.rl.conftest import ScriptedEngine, call, solve
from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS, MODELS, TOKENIZERS
from toolbox.data.sources.arithmetic_tools import arithmetic_tools
from toolbox.data.sources.lookup_tools import lookup_tools

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def lookup():
    return lookup_tools(num_train=40, num_test=6).test


@pytest.fixture(scope="module")
def calculator():
    return arithmetic_tools(num_train=40, num_test=6, digits=2, fixed_width=True, templates=3).test


@pytest.fixture(scope="module")
def tokenizer(lookup, calculator):
    texts = [json.dumps(r["messages"]) + r["tools"] + r["tool_call_text"] for r in [*lookup, *calculator]]
    return TOKENIZERS.build({"name": "char"}, corpus=[*texts, "The answer is 0123456789-."])


def question_of(prompt: str) -> str:
    return re.findall(r"<\|user\|>([^<]*)<\|eos\|>", prompt)[-1]


def spoiled(records, policy=solve):
    """``solve``, except: record 1's calculator call adds 1 to its first operand, record 2 answers 7
    after its calls, record 3 answers 7 at once."""
    index = {r["question"]: i for i, r in enumerate(records)}

    def reply(prompt: str) -> str:
        i = index[question_of(prompt)]
        text = policy(prompt)
        if i == 3 or (i == 2 and text.startswith("The answer")):
            return "The answer is 7."
        if i == 1 and '"calculator"' in text:
            expression = json.loads(text[len("<tool_call>") : -len("</tool_call>")])["arguments"][
                "expression"
            ]
            a, op, b = re.match(r"(\d+)([-+*])(\d+)", expression).groups()
            return call("calculator", expression=f"{int(a) + 1}{op}{b}")
        return text

    return reply


def parts(records, tokenizer, model, engine=None, cfg=None):
    return SimpleNamespace(
        test_records=records, tokenizer=tokenizer, model=model, engine=engine, cfg=cfg,
        strategy=SimpleNamespace(unwrap=lambda m: m, device="cpu"),
    )  # fmt: skip


def scripted(records, tokenizer, policy, env):
    model = object()
    engine = ScriptedEngine(tokenizer, policy)
    engine.model = model  # the run's engine generates with the model: the evaluator uses it
    evaluator = EVALUATORS.build(
        {"name": "env_episodes", "env": {"name": env}, "max_reply_tokens": 128}, "eval"
    )
    return evaluator, evaluator(parts(records, tokenizer, model, engine))


def test_scripted_lookup_episodes_score_as_the_environment(lookup, tokenizer):
    evaluator, metrics = scripted(lookup, tokenizer, spoiled(lookup), "lookup_calculator")
    # right: 0, 4, 5; 1 looked up, computed a wrong sum and copied it; 2 computed, answered 7;
    # 3 answered 7 without a call
    assert metrics == {
        "eval/reward": pytest.approx(3 / 6),
        "eval/correct": pytest.approx(3 / 6),
        "eval/looked_up": pytest.approx(5 / 6),
        "eval/computed": pytest.approx(4 / 6),
    }
    episodes = evaluator.last_episodes
    assert [len(e.turns) for e in episodes] == [3, 3, 3, 1, 3, 3]
    assert [e.task["expression"] for e in episodes] == [r["expression"] for r in lookup]
    assert all(e.finish_reason == "stop" for e in episodes)


def test_the_environment_comes_from_trainer_env_or_fails_with_the_fix(lookup, tokenizer):
    from omegaconf import OmegaConf

    model = object()
    engine = ScriptedEngine(tokenizer)
    engine.model = model
    cfg = OmegaConf.create({"trainer": {"name": "agent_grpo", "env": {"name": "lookup_calculator"}}})
    metrics = EVALUATORS.build({"name": "env_episodes", "max_reply_tokens": 128}, "eval")(
        parts(lookup, tokenizer, model, engine, cfg)
    )
    assert metrics["eval/correct"] == 1.0 and metrics["eval/looked_up"] == 1.0
    with pytest.raises(ConfigError, match=r"no environment to run; name one \(eval.env_episodes.env="):
        EVALUATORS.build({"name": "env_episodes"}, "eval")(parts(lookup, tokenizer, model, engine))


class PolicyModel:
    """``generate`` as a causal LM's, each (left-padded) prompt answered by ``policy(text)``: the
    ``tool_calls`` evaluator's side of a scripted policy."""

    def __init__(self, tokenizer, policy) -> None:
        self.tokenizer, self.policy = tokenizer, policy
        self.config = SimpleNamespace(max_position_embeddings=100_000)

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **_):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
            reply = self.tokenizer.encode(self.policy(text), add_special_tokens=False)
            rows.append(reply[: max_new_tokens - 1] + [eos_token_id])
        width = max(len(r) for r in rows)
        out = [r + [pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(out, dtype=torch.long)], dim=1)


def test_calculator_scores_agree_with_tool_calls_on_a_scripted_policy(calculator, tokenizer):
    policy = spoiled(calculator)
    _, episodes = scripted(calculator, tokenizer, policy, "calculator")
    tool_calls = EVALUATORS.build({"name": "tool_calls", "max_new_tokens": 128}, "eval")(
        parts(calculator, tokenizer, PolicyModel(tokenizer, policy))
    )
    assert episodes["eval/correct"] == tool_calls["eval/answer_accuracy"] == pytest.approx(3 / 6)
    assert episodes["eval/tool_call_ok"] == tool_calls["eval/tool_call_success"] == pytest.approx(4 / 6)


def test_calculator_agrees_with_tool_calls_on_a_tiny_llama(calculator, tokenizer):
    """A random tiny Llama, greedy both ways: the same first reply to every problem (the torch
    engine's greedy decoding is transformers'), so the same scores."""
    torch.manual_seed(0)
    specials = {"vocab_size": len(tokenizer), "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": 64, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
         "max_position_embeddings": 1024}, "model", **specials,
    ).eval()  # fmt: skip
    with torch.no_grad():  # special tokens' logits 0 (tied embeddings): replies of plain text
        model.model.embed_tokens.weight[:8] = 0.0  # ids 0-7: pad, bos, eos, unk, the roles
    run = parts(calculator, tokenizer, model)
    episodes = EVALUATORS.build(
        {"name": "env_episodes", "env": {"name": "calculator"}, "max_reply_tokens": 16}, "eval"
    )
    tool_calls = EVALUATORS.build({"name": "tool_calls", "max_new_tokens": 16}, "eval")
    with torch.no_grad():
        by_episodes, by_tool_calls = episodes(run), tool_calls(run)
    firsts = [e.turns[0].text for e in episodes.last_episodes]
    assert firsts == [r["replies"][0] for r in tool_calls.last_runs] and len(set(firsts)) > 1
    assert by_episodes["eval/correct"] == by_tool_calls["eval/answer_accuracy"]
    assert by_episodes["eval/tool_call_ok"] == by_tool_calls["eval/tool_call_success"]
