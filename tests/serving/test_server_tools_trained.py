"""The official ``openai`` client's tool-calling round trip against ``toolbox serve`` with a model
*trained* to call a tool (test_server_tools.py forces the call with ``tool_choice``; here nothing
is forced: ``tool_choice`` is left at "auto" and the model decides).

A tiny Llama is trained in the fixture (300 steps; 47 s on one core at load ~3) on
conversations in the server's own rendering (the ``chat`` dataset renders tool calls as ``toolbox
serve`` does): asked for the weather or the time it calls ``get_weather`` or ``get_time``, and after
the tool's reply it states a result; greeted, it answers without a call. The results are drawn at
random, independently of the question, so a final answer is right only if it repeats the tool's
result: that part is not learned within this budget yet (xfail below).
"""

from __future__ import annotations

import json
import random

import openai
import pytest
from conftest import free_port
from server_util import start_server


def tool(name: str, description: str) -> dict:
    params = {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


TOOLS = [tool("get_weather", "the weather here"), tool("get_time", "the time of day here")]
# question -> the tool that answers it and the results it may return (drawn at random, so that an
# answer is right only if it repeats the tool's result)
ASKS = {
    "What is the weather?": ("get_weather", ("sunny", "rainy", "windy", "foggy", "snowy", "cloudy")),
    "How is the weather today?": ("get_weather", ("sunny", "rainy", "windy", "foggy", "snowy", "cloudy")),
    "What time is it?": ("get_time", ("noon", "midnight", "dawn", "dusk", "morning", "evening")),
    "Tell me the time.": ("get_time", ("noon", "midnight", "dawn", "dusk", "morning", "evening")),
}
GREETINGS = ("hello", "hi there", "good morning")
HELLO = "Hello! Ask me about the weather or the time."


def conversation(rng: random.Random, i: int) -> list[dict]:
    if i % 4 == 3:
        return [{"role": "user", "content": rng.choice(GREETINGS)}, {"role": "assistant", "content": HELLO}]
    question = rng.choice(sorted(ASKS))
    name, results = ASKS[question]
    result = rng.choice(results)
    call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result},
        {
            "role": "assistant",
            "content": f"{result}.",
        },  # the tool's token itself ("It is sunny" has " sunny")
    ]


@pytest.fixture(scope="module")
def trained_tool_model_dir(tmp_path_factory):
    import torch

    from toolbox.core.registries import MODELS, TOKENIZERS
    from toolbox.data.base import Splits
    from toolbox.data.datasets.chat import Chat

    rng = random.Random(0)
    records = [{"messages": conversation(rng, i), "tools": json.dumps(TOOLS)} for i in range(2000)]
    corpus = [*Splits(records, []).texts(), json.dumps([t["function"] for t in TOOLS], separators=(",", ":"))]
    corpus += [f'<tool_call>{{"name":"{t["function"]["name"]}","arguments":{{}}}}</tool_call>' for t in TOOLS]
    # vocabulary enough for every result word to be one token, so that repeating it is one copy
    tok = TOKENIZERS.build({"name": "bpe", "vocab_size": 1000}, corpus=corpus)
    examples = Chat(tok, max_length=256)(records)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: a second thread only waits for the other core
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 512},
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    steps, batch = 300, 16
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps, pct_start=0.1)
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
    torch.set_num_threads(threads)
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


@pytest.mark.parametrize(
    ("question", "result"),
    [("What is the weather?", "foggy"), ("Tell me the time.", "dusk"), ("What time is it?", "noon")],
)
def test_a_trained_model_calls_the_tool_unforced_and_answers_with_its_result(client, question, result):
    messages = [{"role": "user", "content": question}]
    first = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=40, temperature=0)  # fmt: skip
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.function.name == ASKS[question][0] and json.loads(call.function.arguments) == {}

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    final = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=40, temperature=0)  # fmt: skip
    answer = final.choices[0]
    assert answer.finish_reason == "stop" and answer.message.tool_calls is None
    # a final answer in the trained form, with one of this tool's results (which one the model
    # says does not yet follow the result sent: see the xfail test below)
    assert answer.message.content in {f"{r}." for r in ASKS[question][1]}


@pytest.mark.xfail(
    strict=False,
    reason="in 300-600 steps the model learns when and which tool to call, but not to repeat the "
    "result it is sent (it answers the most frequent one). Measured outside the test (same data, 1 thread): "
    "with 6 results per tool copying never emerged by 600 steps (<= 8/24, chance); with 30 it is "
    "seed-dependent: 120/120 at 800 steps for seed 0, 74/120 for seed 1, 4/120 for seed 2 - no budget "
    "that fits the default suite learns it reliably yet",
)
def test_the_answer_follows_the_tools_result_not_the_question(client):
    """The same question, two results: two answers (the result decides, the model does not guess)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    answers = set()
    for result in ("sunny", "snowy"):
        messages = [
            {"role": "user", "content": "What is the weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]
        out = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=40, temperature=0)  # fmt: skip
        answers.add(out.choices[0].message.content)
    assert answers == {"sunny.", "snowy."}


def test_a_trained_model_answers_a_greeting_without_a_call(client):
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        tools=TOOLS,
        max_tokens=40,
        temperature=0,
    )
    choice = out.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == HELLO
