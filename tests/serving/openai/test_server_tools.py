"""Tool calling and JSON output through ``toolbox serve`` with the official ``openai`` client.

The model is a random tiny Llama over a character tokenizer of printable ASCII (so it can write
JSON); it calls tools because ``tool_choice`` "required" or a named function constrains its output
to the Hermes format (``toolbox/data/hermes/calls.py``), and ``response_format`` constrains it to a
JSON schema (``toolbox/serving/structured.py``, llguidance).
"""

from __future__ import annotations

import json
import string

import jsonschema
import openai
import pytest
from server_util import start_server

from tests.serving.conftest import free_port
from toolbox.data.hermes import calls as tool_calls

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
    """A named tool_choice, streamed: the call's header first, then its arguments in fragments that
    add up to the non-streamed call's arguments (same seed, same tokens)."""
    kw = dict(
        model="tiny",
        messages=[{"role": "user", "content": "time?"}],
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=200,
        seed=3,
    )
    [whole] = client.chat.completions.create(**kw).choices[0].message.tool_calls
    deltas, finish, content = [], None, ""
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            deltas.extend(c.delta.tool_calls or [])
            content += c.delta.content or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    head = deltas[0]
    assert head.function.name == "get_time" and head.index == 0 and head.id.startswith("call_")
    assert all(d.index == 0 and d.function.name is None for d in deltas[1:]) and len(deltas) > 5
    arguments = "".join(d.function.arguments for d in deltas)
    assert arguments == whole.function.arguments
    assert json.loads(arguments)["zone"] in ("utc", "cet")


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


# streamed tool calls, from a model trained to write text and then a call -----------------------------
CALLER_MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLER_REPLY = (
    'Checking the weather.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
)


@pytest.fixture(scope="module")
def caller(client, ascii_model_dir, tmp_path_factory):
    """A client of a server whose model was trained (on this one conversation, ~300 steps) to answer
    ``CALLER_MESSAGES`` with a sentence and then a call: a random model is constrained to a bare call."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ascii_model_dir)
    probe = client.chat.completions.create(
        model="tiny",
        messages=CALLER_MESSAGES,
        tools=[WEATHER],
        max_tokens=1,
        extra_body={"return_token_ids": True},
    )
    prompt = probe.model_extra["prompt_token_ids"]  # exactly what the server renders
    reply = tok(CALLER_REPLY, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([prompt + reply])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    model = AutoModelForCausalLM.from_pretrained(ascii_model_dir)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(300):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 1e-3:
            break
    path = tmp_path_factory.mktemp("caller_llama")
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    srv = start_server(path, free_port(), tmp_path_factory.mktemp("caller") / "log")
    yield openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=120)
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


def test_streamed_tool_call_arrives_per_token_after_streamed_content(caller):
    """Streamed with tools: the sentence as content deltas, then one delta with the call's index, id,
    type and name, then ``arguments`` fragments token by token, whose concatenation equals the
    non-streamed call's ``arguments`` (the model writes spaces; both drop them)."""
    kw = dict(model="tiny", messages=CALLER_MESSAGES, tools=[WEATHER], max_tokens=120, temperature=0)
    whole = caller.chat.completions.create(**kw).choices[0]
    assert whole.finish_reason == "tool_calls"
    assert whole.message.content == "Checking the weather."
    [call] = whole.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Paris"}')

    events = []  # ("content", text) / ("call", delta) in arrival order
    finish = None
    for chunk in caller.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            if c.delta.content:
                events.append(("content", c.delta.content))
            for d in c.delta.tool_calls or []:
                events.append(("call", d))
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    kinds = [k for k, _ in events]
    first_call = kinds.index("call")
    assert set(kinds[:first_call]) == {"content"} and set(kinds[first_call:]) == {"call"}
    content = [x for k, x in events if k == "content"]
    assert "".join(content) == "Checking the weather." and len(content) > 5  # streamed, not at the end
    deltas = [x for k, x in events if k == "call"]
    head, fragments = deltas[0], deltas[1:]
    assert head.index == 0 and head.id.startswith("call_") and head.type == "function"
    assert head.function.name == "get_weather" and head.function.arguments == ""
    assert all(d.index == 0 and d.id is None and d.function.name is None for d in fragments)
    assert len(fragments) > 5  # the arguments as they are generated
    assert "".join(d.function.arguments for d in fragments) == call.function.arguments


def test_streamed_tool_call_keeps_every_tokens_logprob(caller):
    """Tokens whose text the parser holds back (a possible ``<tool_call>``, whitespace) send their
    log-probs with the next chunk: one entry per generated token, as in the whole response."""
    kw = dict(
        model="tiny", messages=CALLER_MESSAGES, tools=[WEATHER], max_tokens=120, temperature=0, logprobs=True
    )
    whole = caller.chat.completions.create(**kw)
    entries, usage = [], None
    for chunk in caller.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for c in chunk.choices:
            entries.extend(c.logprobs.content if c.logprobs else [])
    assert usage.completion_tokens == whole.usage.completion_tokens == len(entries)
    assert [e.token for e in entries] == [e.token for e in whole.choices[0].logprobs.content]
