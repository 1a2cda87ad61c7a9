"""The official ``openai`` client's tool-calling round trip against ``toolbox serve`` with a model
*trained* to call a tool (test_server_tools.py forces the call with ``tool_choice``; here nothing
is forced: ``tool_choice`` is left at "auto" and the model decides).

A tiny Llama is trained in the fixture (about 300 steps, seconds on one core) on conversations in
the server's own rendering (the ``chat`` dataset renders tool calls as ``toolbox serve`` does):
asked for a city's temperature it calls ``get_temperature`` with that city, and after the tool's
reply it states the number the tool returned; greeted, it answers without a call. The temperatures
are random, so the final answer can only be right by copying the tool's result, and the tests send
results the model never saw in training.
"""

from __future__ import annotations

import json
import random

import openai
import pytest
from conftest import free_port
from server_util import start_server

CITIES = ("paris", "oslo", "rome", "lima", "cairo", "delhi", "tokyo", "quito")
WEATHER = ("sunny", "rainy", "windy", "foggy", "snowy", "cloudy", "stormy", "misty")
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
GREETINGS = ("hello", "hi there", "good morning")
HELLO = "Hello! Ask me about the weather in a city."


# (city, weather) pairs no training conversation has: the tests' tool returns these
HELD_OUT = {("oslo", "sunny"), ("lima", "snowy"), ("tokyo", "foggy"), ("paris", "misty")}


def conversation(rng: random.Random, i: int) -> list[dict]:
    if i % 4 == 3:
        return [{"role": "user", "content": rng.choice(GREETINGS)}, {"role": "assistant", "content": HELLO}]
    city, weather = rng.choice([(c, w) for c in CITIES for w in WEATHER if (c, w) not in HELD_OUT])
    call = {"id": f"call_{i}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}  # fmt: skip
    return [
        {"role": "user", "content": f"What is the weather in {city}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": weather},
        {"role": "assistant", "content": f"It is {weather} in {city}."},
    ]


@pytest.fixture(scope="module")
def trained_tool_model_dir(tmp_path_factory):
    import torch

    from toolbox.core.registries import MODELS, TOKENIZERS
    from toolbox.data.base import Splits
    from toolbox.data.datasets.chat import Chat

    rng = random.Random(0)
    records = [{"messages": conversation(rng, i), "tools": json.dumps([TOOL])} for i in range(2000)]
    corpus = [*Splits(records, []).texts(), json.dumps([TOOL["function"]], separators=(",", ":"))]
    corpus += ['<tool_call>{"name":"get_weather","arguments":{"city":"paris"}}</tool_call>']
    tok = TOKENIZERS.build({"name": "bpe", "vocab_size": 400}, corpus=corpus)
    examples = Chat(tok, max_length=256)(records)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 256},
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    steps, batch = 300, 16
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    for step in range(steps):
        rows = [examples[(step * batch + k) % len(examples)] for k in range(batch)]
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((batch, width), tok.pad_token_id)
        labels = torch.full((batch, width), -100)
        for k, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[k, :n] = torch.tensor(r["input_ids"])
            mask = torch.tensor(r["completion_mask"], dtype=torch.bool)
            labels[k, :n] = torch.where(mask, torch.tensor(r["input_ids"]), -100)
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    assert loss.item() < 0.1, f"the tool model did not learn its task (loss {loss.item():.3f})"
    path = tmp_path_factory.mktemp("tool_llama")
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def client(trained_tool_model_dir, tmp_path_factory):
    srv = start_server(trained_tool_model_dir, free_port(), tmp_path_factory.mktemp("tools_trained") / "log")
    yield openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=120)
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


@pytest.mark.parametrize(("city", "weather"), sorted(HELD_OUT))
def test_a_trained_model_calls_the_tool_unforced_and_answers_with_its_result(client, city, weather):
    messages = [{"role": "user", "content": f"What is the weather in {city}?"}]
    first = client.chat.completions.create(model="tiny", messages=messages, tools=[TOOL], max_tokens=40, temperature=0)  # fmt: skip
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": city}

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": weather})  # a pair never trained on
    final = client.chat.completions.create(model="tiny", messages=messages, tools=[TOOL], max_tokens=40, temperature=0)  # fmt: skip
    answer = final.choices[0]
    assert answer.finish_reason == "stop" and answer.message.tool_calls is None
    assert answer.message.content == f"It is {weather} in {city}."


def test_a_trained_model_answers_a_greeting_without_a_call(client):
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        tools=[TOOL],
        max_tokens=40,
        temperature=0,
    )
    choice = out.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == HELLO
