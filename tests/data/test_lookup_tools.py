"""The lookup_tools source: its records are the solved episodes of the lookup_calculator environment
(rendered by the chat dataset as the environment's episodes and the server render them), its
splits share no expression (its test split is the calculator task's held-out problems), and the
environment plays the source's world; arithmetic_tools' splits share no expression either."""

from __future__ import annotations

import json

import pytest

from tests.rl.conftest import ScriptedEngine
from toolbox.core.registries import SOURCES, TEXT_ENVS, TOKENIZERS
from toolbox.data.datasets.chat import Chat
from toolbox.data.hermes.calls import template_messages
from toolbox.data.sources import lookup_tools as source
from toolbox.data.sources.arithmetic_tools import arithmetic_tools
from toolbox.rl.episodes import EpisodeRunner
from toolbox.serving.engine import SamplingParams


@pytest.fixture(scope="module")
def splits():
    return SOURCES.build({"name": "lookup_tools", "num_train": 60, "num_test": 8}, "data.source")


@pytest.fixture(scope="module")
def tokenizer(splits):
    return TOKENIZERS.build({"name": "char"}, corpus=[*splits.texts(), "The answer is 0123456789-."])


def test_a_record_is_the_solved_episode(splits):
    r = splits.test[0]
    w = source.world(r["expression"])
    a, b = r["expression"][:2], r["expression"][3:]
    assert r["question"] == w.question == r["messages"][0]["content"] and b in r["question"]
    assert r["item"] == w.item and w.inventory[w.item] == int(a) and len(w.inventory) == 4
    assert [m["role"] for m in r["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    lookup, calc = (r["messages"][k]["tool_calls"][0]["function"] for k in (1, 3))
    assert (lookup["name"], json.loads(lookup["arguments"])) == ("lookup", {"item": w.item})
    assert (calc["name"], json.loads(calc["arguments"])) == ("calculator", {"expression": r["expression"]})
    assert [r["messages"][k]["content"] for k in (2, 4, 5)] == [
        a,
        r["answer"],
        f"The answer is {r['answer']}.",
    ]
    assert [t["function"]["name"] for t in json.loads(r["tools"])] == ["lookup", "calculator"]
    assert r["tool_call_text"] == (
        '<tool_call>{"name":"lookup","arguments":{"item":"' + w.item + '"}}</tool_call>'
        '<tool_call>{"name":"calculator","arguments":{"expression":"' + r["expression"] + '"}}</tool_call>'
    )


def test_rows_render_as_the_environments_episodes(splits, tokenizer):
    """The scripted agent's episodes of the test records: their messages tokenize through the chat
    dataset to the ids and completion mask of the records' own conversations (call ids aside, which
    the template does not render), and the opening is the server's rendering of the request."""
    runner = EpisodeRunner(ScriptedEngine(tokenizer), tokenizer, {"name": "lookup_calculator"}, 96)
    episodes = runner.run(list(splits.test), 1, SamplingParams(temperature=0.0), seed=None)
    chat = Chat(tokenizer, max_length=100_000)
    examples = chat(list(splits.test))
    for e, r, ex in zip(episodes, splits.test, examples, strict=True):
        assert e.reward == 1.0 and e.scores == {"correct": True, "looked_up": True, "computed": True}
        ids, mask, _ = chat.tokenize(e.messages, 0, e.tools)
        assert (ex["input_ids"], ex["completion_mask"]) == (ids, mask)
        assert e.all_ids() == ids[: len(e.all_ids())]
        messages, tools = template_messages(
            r["messages"][:1], json.loads(r["tools"]), tokenizer.chat_template
        )
        served = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_dict=True
        )
        assert e.prompt_ids == list(served["input_ids"])


def test_splits_share_no_expression_and_test_is_the_calculator_tasks():
    s = source.lookup_tools(num_train=3000, num_test=200)
    train, test = [r["expression"] for r in s.train], [r["expression"] for r in s.test]
    assert len(set(train)) == 3000 and len(set(test)) == 200 and not set(train) & set(test)
    calculator = arithmetic_tools(num_train=1, num_test=200, digits=2, fixed_width=True, templates=3)
    assert test == [r["expression"] for r in calculator.test]
    assert test[:3] == ["60-33", "73-21", "24+76"]  # pinned: the held-out tasks did not move


def test_arithmetic_tools_splits_share_no_expression():
    """Subtractions are ordered (a >= b), so (a, b) and (b, a) are one problem: before the draw
    skipped repeated expressions, 29 of agent_tools' 200 held-out problems were also in train."""
    s = arithmetic_tools(num_train=10000, num_test=200, digits=2, fixed_width=True, templates=3)
    train, test = [r["expression"] for r in s.train], [r["expression"] for r in s.test]
    assert len(set(train)) == 10000 and len(set(test)) == 200 and not set(train) & set(test)
    six = arithmetic_tools(num_train=2000, num_test=200)  # two templates per operator
    assert not {r["expression"] for r in six.train} & {r["expression"] for r in six.test}


def test_the_environment_plays_the_sources_world(splits):
    from toolbox.rl.text_envs import lookup as env_module

    assert env_module.LOOKUP is source.LOOKUP and env_module.TOOLS is source.TOOLS
    assert env_module.world is source.world and env_module.lookup_reply is source.lookup_reply
    env = TEXT_ENVS.build({"name": "lookup_calculator"})
    for r in splits.test:
        opening = env.reset(r)
        w = source.world(r["expression"])
        assert opening.messages == [{"role": "user", "content": r["question"]}]
        assert (env.item, env.inventory) == (w.item, w.inventory)
        assert opening.tools == json.loads(r["tools"])
    assert (
        source.lookup_reply({"pens": 12}, '{"item": "cups"}')
        == "error: no item 'cups', the inventory has pens"
    )
