"""Text environments: registered (in the catalog), the calculator and lookup tasks scored as the
agent scores them, bad tasks and limits rejected with the fix, a user's environment through the
entry-point group ``toolbox.text_env``."""

from __future__ import annotations

import json
import textwrap

import pytest

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import TEXT_ENVS
from toolbox.rl.text_env import TextEnv


def assistant(content="", calls=()):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{k}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for k, (n, a) in enumerate(calls)
        ]
    return message


def test_built_ins_are_registered_and_in_the_catalog():
    from toolbox.catalog import render_catalog

    assert {"calculator", "lookup_calculator"} <= set(TEXT_ENVS.names())
    catalog = render_catalog()
    assert "### `text_env: calculator`" in catalog and "### `text_env: lookup_calculator`" in catalog


def test_calculator_episode(tasks):
    task = tasks[0]
    env = TEXT_ENVS.build({"name": "calculator"})
    opening = env.reset(task)
    assert opening.messages == [{"role": "user", "content": task["question"]}]
    assert opening.tools[0]["function"]["name"] == "calculator"
    step = env.step(assistant(calls=[("calculator", {"expression": task["expression"]})]))
    assert not step.done and step.messages == [
        {"role": "tool", "tool_call_id": "c0", "content": task["answer"]}
    ]
    step = env.step(assistant(f"The answer is {task['answer']}."))
    assert step.done and step.reward == 1.0 and step.scores == {"correct": True, "tool_call_ok": True}
    env.reset(task)
    wrong = env.step(assistant("The answer is 1."))
    assert wrong.done and wrong.reward == 0.0 and wrong.scores["tool_call_ok"] is False


def test_lookup_calculator_needs_both_tools_in_sequence(tasks):
    task = tasks[1]
    env = TEXT_ENVS.build({"name": "lookup_calculator"})
    opening = env.reset(task)
    a, b = task["expression"].replace("-", "+").replace("*", "+").split("+")
    question = opening.messages[0]["content"]
    assert b in question and a not in question.replace(b, "")  # the first operand is hidden
    assert [t["function"]["name"] for t in opening.tools] == ["lookup", "calculator"]
    missing = env.step(assistant(calls=[("lookup", {"item": "unicorns"})]))
    assert missing.messages[0]["content"].startswith("error: no item 'unicorns'")
    found = env.step(assistant(calls=[("lookup", {"item": env.item})]))
    assert found.messages[0]["content"] == a
    op = task["expression"][len(a)]
    computed = env.step(assistant(calls=[("calculator", {"expression": f"{a}{op}{b}"})]))
    assert computed.messages[0]["content"] == task["answer"]
    done = env.step(assistant(f"The answer is {task['answer']}."))
    assert done.reward == 1.0 and done.scores == {"correct": True, "looked_up": True, "computed": True}
    with pytest.raises(DataError, match="needs an 'expression'"):
        env.reset({"question": "?", "answer": "1"})


def test_bad_limits_and_unknown_names_fail_with_the_fix():
    with pytest.raises(ConfigError, match="max_turns=0"):
        TEXT_ENVS.build({"name": "calculator", "max_turns": 0})
    with pytest.raises(ConfigError, match="Did you mean 'calculator'"):
        TEXT_ENVS.build({"name": "calculater"})


def test_a_users_environment_through_the_entry_point_group(tmp_path, monkeypatch):
    (tmp_path / "my_env.py").write_text(
        textwrap.dedent("""
        from toolbox.rl.text_env import Opening, Step, TextEnv

        class Echo(TextEnv):
            def __init__(self, word: str = "hi", max_turns: int = 2, max_tokens: int = 64):
                super().__init__(max_turns, max_tokens)
                self.word = word

            def reset(self, task):
                return Opening([{"role": "user", "content": "say " + self.word}])

            def step(self, message):
                return Step(done=True, reward=float(message["content"] == self.word))
        """)
    )
    dist = tmp_path / "my_env-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-env\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[toolbox.text_env]\necho = my_env:Echo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    TEXT_ENVS.names()  # the built-ins first
    monkeypatch.setattr(TEXT_ENVS, "_entries", dict(TEXT_ENVS._entries))  # restored after the test
    monkeypatch.setattr(TEXT_ENVS, "_plugins_loaded", False)  # the group is read again
    assert {"echo", "calculator", "lookup_calculator"} <= set(TEXT_ENVS.names())
    env = TEXT_ENVS.build({"name": "echo", "word": "yes"})
    assert isinstance(env, TextEnv) and env.max_turns == 2
    assert env.reset({}).messages[0]["content"] == "say yes"
    assert env.step(assistant("yes")).reward == 1.0
