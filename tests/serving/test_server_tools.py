"""Tool calling and JSON output through ``toolbox serve`` with the official ``openai`` client.

The model is a random tiny Llama over a character tokenizer of printable ASCII (so it can write
JSON); it calls tools because ``tool_choice`` "required" or a named function constrains its output
to the Hermes format (``toolbox/serving/tool_calls.py``), and ``response_format`` constrains it to a
JSON schema (``toolbox/serving/structured.py``, llguidance).
"""

from __future__ import annotations

import json
import string

import jsonschema
import openai
import pytest
from conftest import free_port
from server_util import start_server

from toolbox.serving import tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["utc", "cet"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def ascii_model_dir(tmp_path_factory):
    import torch

    from toolbox.core.registries import MODELS, TOKENIZERS

    tok = TOKENIZERS.build({"name": "char", "model_max_length": 1024}, corpus=[string.printable])
    torch.manual_seed(0)
    model = MODELS.build(
        {"name": "tiny_llama", "max_position_embeddings": 1024},
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    path = tmp_path_factory.mktemp("ascii_llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def client(ascii_model_dir, tmp_path_factory):
    srv = start_server(ascii_model_dir, free_port(), tmp_path_factory.mktemp("tools") / "log")
    yield openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=120)
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


def test_openai_tool_calling_round_trip(client, ascii_model_dir):
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model="tiny", messages=messages, tools=[WEATHER, TIME], tool_choice="required", max_tokens=120, seed=0
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    schema = {WEATHER["function"]["name"]: WEATHER, TIME["function"]["name"]: TIME}[call.function.name]
    jsonschema.validate(args, schema["function"]["parameters"])

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
    final = client.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=[WEATHER, TIME],
        max_tokens=8,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    answer = final.choices[0]
    assert answer.message.tool_calls is None and isinstance(answer.message.content, str)
    assert answer.finish_reason in ("stop", "length")
    seen = AutoTokenizer.from_pretrained(ascii_model_dir).decode(final.model_extra["prompt_token_ids"])
    assert f'<tool_call>{{"name":"{call.function.name}"' in seen and "<|tool|>sunny, 21 C" in seen


def test_the_second_turn_renders_tools_call_and_result(client, ascii_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ascii_model_dir)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    out = client.chat.completions.create(
        model="tiny", messages=messages, tools=[WEATHER], max_tokens=2, extra_body={"return_token_ids": True}
    )
    text = tok.decode(out.model_extra["prompt_token_ids"])
    assert text == (
        '<|bos|><|system|><tools>[{"name":"get_weather","description":"the weather in a city","parameters":'
        '{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],'
        '"additionalProperties":false}}]</tools><|eos|><|user|>weather?<|eos|><|assistant|><tool_call>'
        '{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call><|eos|><|tool|>sunny<|eos|><|assistant|>'
    )


def test_named_tool_choice_and_streamed_tool_calls(client):
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "time?"}],
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=200,
        stream=True,
        seed=3,
    )
    calls, finish = [], None
    for chunk in stream:
        for c in chunk.choices:
            calls.extend(c.delta.tool_calls or [])
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    [call] = calls
    assert call.function.name == "get_time" and call.index == 0
    assert json.loads(call.function.arguments)["zone"] in ("utc", "cet")


def test_json_schema_output_always_parses_against_its_schema(client):
    outputs = []
    for seed in range(3):
        out = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "a person"}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
            n=16,
            max_tokens=200,
            temperature=1.0,
            seed=seed,
        )
        outputs.extend(out.choices)
    assert len(outputs) == 48
    for choice in outputs:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)
    assert len({c.message.content for c in outputs}) > 40  # sampled, not one forced string


def test_json_object_and_completions_response_format(client):
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "json"}],
        response_format={"type": "json_object"},
        max_tokens=300,
        n=4,
        seed=1,
    )
    for choice in out.choices:
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
    comp = client.completions.create(
        model="tiny",
        prompt="x",
        max_tokens=200,
        extra_body={
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
        },
    )
    jsonschema.validate(json.loads(comp.choices[0].text), SCHEMA)


def test_a_schema_that_cannot_compile_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": {"type": "nonsense"}},
            },
        )
    assert "response_format" in e.value.message


def test_hermes_parser():
    text = 'ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>{bad}</tool_call>'
    content, calls = tool_calls.parse(text)
    assert content == "ok <tool_call>{bad}</tool_call>"
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"x":1}')]
    assert tool_calls.parse("plain") == ("plain", [])
