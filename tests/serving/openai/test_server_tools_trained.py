"""The official ``openai`` client's tool-calling round trip against ``toolbox serve`` with a model
*trained* to call a tool (test_server_tools.py forces the call with ``tool_choice``; here nothing
is forced: ``tool_choice`` is left at "auto" and the model decides).

A tiny Llama is trained in the fixture (300 steps on one core; the fixture and the server's start
took 32 s at load ~8) on conversations in the server's own rendering (the ``chat`` dataset renders
tool calls as ``toolbox serve`` does): asked for the weather or the time it calls ``get_weather`` or
``get_time``, and after the tool's reply it states the result; greeted, it answers without a call.
The results are drawn at random, independently of the question, so a final answer is right only if
it repeats the tool's result. Copying is one token of the ~21 a tool conversation scores, and with
every token weighted alike it was learned for some seeds only (lr 2e-3, 300 steps, data and init
seed s: 24/24 of the question x result cases for s = 1, 4; 4, 14, 20/24 for s = 0, 2, 3); the
fixture weights the loss on the last reply 20x: 24/24 for seeds 0-9 at 300 steps, every seed at
24/24 by step 150 (measured with the fixture's data and loop outside the test, 1 thread). The
fixture's own code run with seeds 0-7, greedy: 24/24 copies, 4/4 calls and 3/3 greetings right for
each.
"""

from __future__ import annotations

import json
import random

import openai
import pytest
from server_util import start_server

from tests.serving.conftest import free_port


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
    import torch.nn.functional as F

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
    lr, steps, batch = 2e-3, 300, 16  # at 5e-3 copying was not learned; 3e-3 stalled seed 5 at 4/24
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    for step in range(steps):
        rows = [examples[(step * batch + k) % len(examples)] for k in range(batch)]
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((batch, width), tok.pad_token_id)
        weights = torch.zeros((batch, width))
        for k, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[k, :n] = torch.tensor(r["input_ids"])
            weights[k, :n] = torch.tensor(r["completion_mask"], dtype=torch.float)
            weights[k, len(r["prompt_ids"]) : n] *= 20  # the last reply: the tool's result copied
        logits = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits
        token_loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (token_loss * weights[:, 1:]).sum() / weights[:, 1:].sum()
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
    assert answer.message.content == f"{result}."


def test_the_answer_follows_the_tools_result_not_the_question(client):
    """Every question with every result its tool returns: the answer repeats the result sent."""
    wrong = []
    for question, (name, results) in ASKS.items():
        call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for result in results:
            messages = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": result},
            ]
            out = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=40, temperature=0)  # fmt: skip
            if out.choices[0].message.content != f"{result}.":
                wrong.append((question, result, out.choices[0].message.content))
    assert not wrong, f"{len(wrong)} of 24 answers do not repeat the tool's result: {wrong}"


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
