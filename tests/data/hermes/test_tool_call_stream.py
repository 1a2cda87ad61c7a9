"""The streaming Hermes parser: fed in pieces of any size, it sends the content and calls the
whole-response parser finds (same content, same names, arguments concatenated to the same text)."""

from __future__ import annotations

import pytest

from toolbox.data.hermes import calls as tool_calls
from toolbox.data.hermes.stream import ToolCallStream

TEXTS = [
    'ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>{bad}</tool_call>',
    'Let me check.  <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa ris\\"}", "n": [1, 2]}}\n'
    '</tool_call>\n<tool_call>{"arguments": 5, "name":"g"}</tool_call> tail',
    "plain text < not a tag <tool",
    '<tool_call>{"name":"h"}</tool_call>',
    "a <tool_call>X</tool_call> b",
    '  <tool_call>{"name": "f", "parameters": {"é": "ü"}}</tool_call>  ',
    'cut <tool_call>{"nam',
]


def stream(text: str, size: int) -> tuple[str | None, list[tuple[str, str]], list[int]]:
    parser = ToolCallStream()
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    content, calls, fragments = "", {}, []
    for i, piece in enumerate(pieces):
        c, deltas = parser.feed(piece, final=i == len(pieces) - 1)
        content += c
        for d in deltas:
            if d.name is not None:
                assert d.id.startswith("call_") and d.index not in calls
                calls[d.index] = [d.name, ""]
            calls[d.index][1] += d.arguments
            fragments.append(d.index)
    return content or None, [tuple(calls[i]) for i in sorted(calls)], fragments


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_streamed_equals_whole(text, size):
    content, calls = tool_calls.parse(text)
    got_content, got_calls, _ = stream(text, size)
    assert got_content == content
    assert got_calls == [(c.name, c.arguments) for c in calls]


def test_arguments_come_character_by_character_after_the_name():
    text = '<tool_call>{"name": "f", "arguments": {"x": [1, 2]}}</tool_call>'
    parser = ToolCallStream()
    out = [parser.feed(ch) for ch in text]
    deltas = [d for _, ds in out for d in ds]
    assert deltas[0].name == "f" and deltas[0].arguments == ""
    assert [d.arguments for d in deltas[1:]] == list('{"x":[1,2]}')
    assert all(c == "" for c, _ in out)
    assert tool_calls.parse(text)[1][0].arguments == '{"x":[1,2]}'


def test_a_call_whose_json_breaks_after_its_name_stays_a_call():
    """Once the name is sent it cannot be taken back (as in vLLM); the whole parser keeps it text."""
    text = '<tool_call>{"name": "f", "arguments": {"x": 1}} junk</tool_call>'
    assert tool_calls.parse(text) == (text, [])
    content, calls, _ = stream(text, 1)
    assert calls == [("f", '{"x":1}')] and content == "junk</tool_call>"
