"""Outputs ``max_tokens`` cuts (issue 37): a forced tool call or a JSON object cut short ends with
finish_reason ``length``, never ``tool_calls`` with cut arguments nor ``stop`` with cut JSON, and the
unstreamed reply keeps no raw ``<tool_call>`` text in its content."""

from __future__ import annotations

import json

import openai
import pytest
from server_util import start_server
from test_server_tools import WEATHER, ascii_model_dir  # noqa: F401 - the fixture

from tests.serving.conftest import free_port


@pytest.fixture(scope="module")
def client(ascii_model_dir, tmp_path_factory):  # noqa: F811
    srv = start_server(ascii_model_dir, free_port(), tmp_path_factory.mktemp("cut") / "log")
    yield openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=120)
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


KW = dict(
    model="tiny",
    messages=[{"role": "user", "content": "weather?"}],
    tools=[WEATHER],
    tool_choice="required",
    seed=0,
)
# cuts in the call's name (16: "<tool_call>" is 11 characters), in its arguments (52-120: before,
# streamed replies ended "tool_calls" with arguments "" or "{"), and one long enough to finish it
MAX_TOKENS = [16, 52, 80, 120, 200]


def test_a_forced_call_cut_by_max_tokens_ends_length_streamed(client):
    finishes = []
    for max_tokens in MAX_TOKENS:
        finish, arguments = None, ""
        for chunk in client.chat.completions.create(**KW, max_tokens=max_tokens, stream=True):
            for c in chunk.choices:
                for d in c.delta.tool_calls or []:
                    arguments += d.function.arguments or ""
                finish = c.finish_reason or finish
        assert finish in ("length", "tool_calls"), (max_tokens, finish)
        if finish == "tool_calls":
            assert isinstance(json.loads(arguments), dict), (max_tokens, arguments)
        finishes.append(finish)
    assert finishes[0] == "length" and finishes.count("length") >= 3, finishes  # some cuts were made


def test_a_forced_call_cut_by_max_tokens_ends_length_whole(client):
    finishes = []
    for max_tokens in MAX_TOKENS:
        choice = client.chat.completions.create(**KW, max_tokens=max_tokens).choices[0]
        assert "<tool_call>" not in (choice.message.content or ""), (max_tokens, choice)
        if choice.finish_reason == "length":
            assert not choice.message.tool_calls, (max_tokens, choice)
        else:
            assert choice.finish_reason == "tool_calls", (max_tokens, choice)
            for call in choice.message.tool_calls:
                assert isinstance(json.loads(call.function.arguments), dict), (max_tokens, call)
        finishes.append(choice.finish_reason)
    assert finishes[0] == "length" and finishes.count("length") >= 3, finishes


def test_json_object_is_valid_json_or_length(client):
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "json"}],
        response_format={"type": "json_object"},
        max_tokens=12,
        n=8,
        seed=3,
    )
    for choice in out.choices:
        if choice.finish_reason != "length":
            assert choice.finish_reason == "stop"
            assert isinstance(json.loads(choice.message.content), dict), choice
