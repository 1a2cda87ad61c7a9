"""A traced tool-calling fixture: agent runs that call a calculator, as an agent records them."""

from __future__ import annotations

import pytest

from toolbox.tracing import Tracer, chat_to_messages

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "evaluate an arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def conversation(i: int) -> list[dict]:
    """The OpenAI-format conversation of run i: question, tool call, tool reply, answer."""
    a, b = i, i + 3
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "calculator", "arguments": f'{{"expression": "{a}+{b}"}}'},
    }
    return [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": f"Tom has {a} apples and buys {b} more. How many has he?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": str(a + b)},
        {"role": "assistant", "content": f"He has {a + b}."},
    ]


def _record_runs(tracer: Tracer, n: int = 12, sessions: int = 4) -> list[list[dict]]:
    """n agent runs into the tracer (two model calls and one tool call each); run i is scored
    correct unless i % 3 == 0. Returns the conversations."""
    chats = []
    for i in range(n):
        chat = conversation(i)
        with tracer.span("agent", "solve", session_id=f"session-{i % sessions}") as run:
            with tracer.span(
                "llm_call", "chat", inputs=chat_to_messages(chat[:2]), tools=TOOLS, model="tiny"
            ) as c:
                c.outputs = chat_to_messages(chat[2:3])
                c.finish_reason = "tool_calls"
            with tracer.span("tool_call", "calculator", inputs={"expression": f"{i}+{i + 3}"}) as t:
                t.outputs = str(2 * i + 3)
            with tracer.span(
                "llm_call", "chat", inputs=chat_to_messages(chat[:4]), tools=TOOLS, model="tiny"
            ) as c:
                c.outputs = chat_to_messages(chat[4:])
                c.finish_reason = "stop"
        tracer.score(run.id, "correct", i % 3 != 0, source="reward")
        chats.append(chat)
    return chats


@pytest.fixture(params=["jsonl", "sqlite"])
def store_path(request, tmp_path):
    return tmp_path / f"traces.{request.param}"


@pytest.fixture
def record_runs():
    """record_runs(tracer, n=12, sessions=4) -> the conversations recorded."""
    return _record_runs


@pytest.fixture
def tool_conversation():
    """tool_conversation(i): run i's conversation (question, call, reply, answer)."""
    return conversation


@pytest.fixture
def tools():
    return TOOLS


def _tool_template() -> str:
    """A chat template that renders tool calls, so a test can see them in the scored tokens."""
    return (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{% if m['content'] %}{{ m['content'] }}{% endif %}"
        "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<call>{{ c['function']['name'] }}"
        "{{ c['function']['arguments'] }}</call>{% endfor %}{% endif %}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )


def _tokenizer(rows):
    from toolbox.data.tokenizers.char import char

    texts = [
        t
        for r in rows
        for m in r["messages"]
        for t in [m["content"] or "", *[c["function"]["arguments"] for c in m["tool_calls"] or []]]
    ]
    tok = char([*texts, "<call>/calculator"])
    tok.chat_template = _tool_template()
    return tok


@pytest.fixture
def tool_tokenizer():
    """tool_tokenizer(rows): a char tokenizer over the rows' text whose template renders tool calls."""
    return _tokenizer


@pytest.fixture
def sft_dir(tmp_path):
    """An SFT dataset folder made from 24 traced tool-calling runs."""
    from toolbox.tracing.dataset import to_dataset

    with Tracer(tmp_path / "t.sqlite") as tracer:
        _record_runs(tracer, n=24)
    to_dataset(tmp_path / "t.sqlite", tmp_path / "sft", test_fraction=0.25)
    return tmp_path / "sft"
