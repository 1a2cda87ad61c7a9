"""``serve --trace``: the middleware records each request and response of the real OpenAI-compatible
app (the official openai client, plain and streamed), never the API key."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest
import torch

from toolbox.tracing import Query, open_store
from toolbox.tracing.serving import RequestTracer, TraceMiddleware, assemble_stream

KEY = "sk-test-0123456789abcdefghij"


def _text(messages):
    return "".join(p.get("content", "") for m in messages for p in m["parts"] if p["type"] == "text")


@pytest.fixture
def app_and_store(tmp_path):
    from toolbox.core.registries import ENGINES, MODELS, TOKENIZERS
    from toolbox.serving.openai.app import build_app

    torch.set_num_threads(1)
    tok = TOKENIZERS.build({"name": "char"}, corpus=["abcdefghijklmnopqrstuvwxyz 0123456789+=?.,"])
    torch.manual_seed(0)
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": 64, "num_layers": 1, "num_heads": 2, "intermediate_size": 128},
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    ).eval()  # fmt: skip
    engine = ENGINES.build({"name": "torch"}, "engine", model=model, tokenizer=tok)
    path = tmp_path / "serve.sqlite"
    tracer = RequestTracer(path, flush_every=1)
    app = TraceMiddleware(build_app(engine, "tiny", api_key=KEY), tracer)
    yield app, path, tracer
    tracer.close()
    engine.shutdown()


def test_requests_and_responses_are_recorded_without_the_api_key(app_and_store):
    app, path, tracer = app_and_store

    async def talk():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        client = openai.AsyncOpenAI(base_url="http://test/v1", api_key=KEY, http_client=http)
        messages = [{"role": "user", "content": "what is 2+3? write to bob@example.com"}]
        chat = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0,
                                                    extra_headers={"X-Session-Id": "s-1", "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})  # fmt: skip
        stream = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0,
                                                      stream=True)  # fmt: skip
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        completion = await client.completions.create(
            model="tiny", prompt="1+1=", max_tokens=4, temperature=0, n=2, seed=1
        )
        with pytest.raises((openai.NotFoundError, openai.BadRequestError)):
            await client.chat.completions.create(model="nope", messages=messages, max_tokens=2)
        await http.aclose()
        return chat, streamed, completion

    chat, streamed, completion = asyncio.run(talk())
    tracer.flush()
    with open_store(path, readonly=True) as store:
        chats = [r for r in store.query(Query(name="chat"))]
        texts = list(store.query(Query(name="text_completion")))
    ok = [r for r in chats if r.error is None]
    assert len(ok) == 2 and len(texts) == 2 and len(chats) == 3
    plain = next(r for r in ok if r.session_id == "s-1")
    assert _text(plain.outputs) == chat.choices[0].message.content
    assert _text(plain.inputs) == "what is 2+3? write to [REDACTED:email]"
    assert (plain.input_tokens, plain.output_tokens) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    assert plain.model == "tiny" and plain.finish_reason == chat.choices[0].finish_reason
    assert (plain.trace_id, plain.parent_id) == ("ab" * 16, "cd" * 8)  # the caller's W3C trace context
    assert plain.metadata["temperature"] == 0 and plain.latency_s > 0
    stream_r = next(r for r in ok if r is not plain)
    assert _text(stream_r.outputs) == streamed and stream_r.metadata["stream"] is True
    assert {t.trace_id for t in texts} == {texts[0].trace_id}  # n=2: sibling choices of one request
    assert sorted(_text(t.outputs) for t in texts) == sorted(c.text for c in completion.choices)
    failed = next(r for r in chats if r.error)
    assert re.match(r"HTTP 40[04]: the model .nope. does not exist", failed.error) and failed.outputs is None
    data = b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert KEY.encode() not in data and b"bob@example.com" not in data


def test_a_streamed_tool_call_is_reassembled():
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "calc", "arguments": '{"expr'},
                            }
                        ]
                    },
                }
            ],
        },  # fmt: skip
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ession": "2+3"}'}}]},
                }
            ],
        },
        {
            "id": "c1",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 9},
        },  # fmt: skip
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    out = assemble_stream(body.encode(), "chat")
    assert out["choices"] == [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "2+3"}'}}]}}
    ]  # fmt: skip
    assert out["usage"]["completion_tokens"] == 9 and out["model"] == "m"
