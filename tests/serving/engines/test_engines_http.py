"""The http engine: retries, timeouts and SSE against a tiny fake server, top-k logprobs against
``toolbox serve``, then all of it against a real vLLM server.

The fake server (``http.server`` on 127.0.0.1, in a thread) answers from a script: fail the first k
requests with 503, sleep, always answer an error, or answer a given logprobs object, and records what
it was sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import torch
from server_util import start_server

from tests.serving.conftest import free_port
from toolbox.core.registries import ENGINES
from toolbox.serving.engine import EngineError, SamplingParams
from toolbox.serving.engines.http_engine import RemoteError

PROMPTS = ["12+34=", "hello world", "a", "the quick brown fox 99"]


class FakeServer:
    """An OpenAI-shaped server whose failures a test scripts."""

    def __init__(self) -> None:
        self.fail_first = 0  # answer this many requests with 503 first
        self.error_status: int | None = None  # answer every request with this status
        self.delay = 0.0  # seconds to wait before answering
        self.logprobs: dict | None = None  # the logprobs object of every answer that asks for one
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                server.paths.append(self.path)
                self._send(200, {"object": "list", "data": [{"id": "fake", "max_model_len": 128}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.paths.append(self.path)
                server.bodies.append(body)
                time.sleep(server.delay)
                if server.error_status is not None:
                    return self._send(
                        server.error_status, {"error": {"message": "bad request: top_p", "code": 400}}
                    )
                if server.fail_first > 0:
                    server.fail_first -= 1
                    return self._send(503, {"error": {"message": "overloaded"}})
                if self.path.endswith("/chat/completions"):
                    message = {"role": "assistant", "content": "hi!"}
                    logprobs = server.logprobs if body.get("logprobs") else None
                    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": logprobs}
                    return self._send(200, {"choices": [choice]})
                if body.get("stream"):
                    return self._stream(body)
                choices = [
                    {
                        "index": i,
                        "text": "ok",
                        "token_ids": [7, 8],
                        "finish_reason": "length",
                        "logprobs": (server.logprobs or {"token_logprobs": [-0.5, -0.25]})
                        if "logprobs" in body
                        else None,
                    }
                    for i in range(body.get("n", 1))
                ]
                self._send(200, {"choices": choices, "usage": {}})

            def _stream(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece, ids, finish in (("o", [7], None), ("k", [8], None), ("", [], "length")):
                    chunk = {
                        "choices": [{"index": 0, "text": piece, "token_ids": ids, "finish_reason": finish}]
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


def client(url: str, **kw):
    spec = {"name": "http", "base_url": url, "retry_delay": 0.01, "max_retry_delay": 0.05, **kw}
    return ENGINES.build(spec)


def test_transient_errors_are_retried(fake):
    fake.fail_first = 2
    out = client(fake.url, max_retries=4).generate([[1, 2, 3]], SamplingParams(max_tokens=2))
    assert out[0].completions[0].token_ids == [7, 8] and out[0].prompt_token_ids == [1, 2, 3]
    assert len(fake.bodies) == 3


def test_retries_give_up_after_max_retries(fake):
    fake.fail_first = 100
    with pytest.raises(EngineError, match="after 3 attempts.*503"):
        client(fake.url, max_retries=3).generate([[1]], SamplingParams())
    assert len(fake.bodies) == 3


def test_client_errors_are_not_retried(fake):
    fake.error_status = 400
    with pytest.raises(RemoteError, match="400: bad request: top_p") as info:
        client(fake.url, max_retries=5).generate([[1]], SamplingParams())
    assert info.value.status == 400 and len(fake.bodies) == 1


def test_a_slow_server_times_out_and_is_retried(fake):
    fake.delay = 1.0
    start = time.monotonic()
    with pytest.raises(EngineError, match="after 2 attempts.*Timeout"):
        client(fake.url, max_retries=2, timeout=0.2).generate([[1]], SamplingParams())
    assert time.monotonic() - start < 1.5 and len(fake.bodies) == 2


def test_nothing_listening_fails_with_the_reason():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match="ConnectError"):
        client(f"http://127.0.0.1:{port}/v1", max_retries=2, model_name="m").generate([[1]], SamplingParams())


def test_parameters_map_onto_the_request(fake):
    engine = client(fake.url)
    params = SamplingParams(max_tokens=5, temperature=0.5, top_k=4, stop=["x"], seed=3, n=2, logprobs=True)
    out = engine.generate(["hi", [1, 2]], params)
    assert [len(o.completions) for o in out] == [2, 2] and out[0].completions[1].logprobs == [-0.5, -0.25]
    body = fake.bodies[0]
    assert body["model"] == "fake" and engine.max_model_len == 128
    assert {k: body[k] for k in ("max_tokens", "temperature", "top_k", "stop", "seed", "n", "logprobs")} == {
        "max_tokens": 5,
        "temperature": 0.5,
        "top_k": 4,
        "stop": ["x"],
        "seed": 3,
        "n": 2,
        "logprobs": 0,
    }
    assert body["return_token_ids"] is True and "min_p" not in body
    assert sorted(str(b["prompt"]) for b in fake.bodies) == ["[1, 2]", "hi"]
    plain = client(fake.url, extensions=False)
    with pytest.raises(ValueError, match="top_k=4 is not part of the OpenAI API"):
        plain.generate(["hi"], params)


def test_stream_and_async_generate_with_a_retry(fake):
    engine = client(fake.url, model_name="fake")

    async def scenario():
        fake.fail_first = 1
        deltas = [d async for d in engine.stream([1, 2], SamplingParams(max_tokens=2))]
        fake.fail_first = 1
        out = await engine.generate_async([1, 2], SamplingParams(max_tokens=2))
        return deltas, out

    deltas, out = asyncio.run(scenario())
    assert "".join(d.text for d in deltas) == "ok" and [t for d in deltas for t in d.token_ids] == [7, 8]
    assert deltas[-1].finish_reason == "length"
    assert out.completions[0].token_ids == [7, 8]
    assert len(fake.bodies) == 4 and fake.bodies[0]["stream"] is True


def test_chat_posts_messages(fake):
    out = client(fake.url, model_name="fake").chat([[{"role": "user", "content": "hello"}]], SamplingParams())
    assert fake.paths[-1] == "/v1/chat/completions" and fake.bodies[-1]["messages"][0]["content"] == "hello"
    assert out[0].completions[0].text == "hi!" and out[0].completions[0].finish_reason == "stop"


def test_top_logprobs_requests_and_vllm_shaped_answers(fake, tokenizer):
    """vLLM lists a step's chosen token first, then the k most likely (k + 1 entries when the chosen
    is not among them): the engine sorts them and keeps k."""
    engine = client(fake.url, model_name="fake")
    fake.logprobs = {
        "tokens": ["token_id:7", "token_id:8"],
        "token_logprobs": [-0.5, -0.25],
        "top_logprobs": [
            {"token_id:7": -0.5, "token_id:3": -0.1, "token_id:4": -0.3},
            {"token_id:8": -0.25, "token_id:9": -2.0},
        ],
    }
    top2 = SamplingParams(max_tokens=2, logprobs=True, top_logprobs=2)
    out = engine.generate([[1, 2]], top2)[0].completions[0]
    assert out.top_logprobs == [{3: -0.1, 4: -0.3}, {8: -0.25, 9: -2.0}] and out.logprobs == [-0.5, -0.25]
    assert list(out.top_logprobs[0]) == [3, 4]  # most likely first
    body = fake.bodies[-1]
    assert body["logprobs"] == 2 and body["return_tokens_as_token_ids"] is True
    # no top-k: as before (logprobs 0, token names as they are, no top_logprobs)
    out = engine.generate([[1, 2]], SamplingParams(max_tokens=2, logprobs=True))[0].completions[0]
    assert out.top_logprobs is None and out.logprobs == [-0.5, -0.25]
    assert fake.bodies[-1]["logprobs"] == 0 and "return_tokens_as_token_ids" not in fake.bodies[-1]
    # chat
    entry = {"token": "token_id:7", "logprob": -0.5, "bytes": [104]}
    fake.logprobs = {
        "content": [{**entry, "top_logprobs": [entry, {"token": "token_id:3", "logprob": -0.1, "bytes": []}]}]
    }
    chat = engine.chat([[{"role": "user", "content": "x"}]], top2)[0].completions[0]
    assert chat.top_logprobs == [{3: -0.1, 7: -0.5}] and chat.logprobs == [-0.5]
    body = fake.bodies[-1]
    assert (body["logprobs"], body["top_logprobs"], body["return_tokens_as_token_ids"]) == (True, 3, True)
    engine.chat([[{"role": "user", "content": "x"}]], replace(top2, top_logprobs=20))
    assert fake.bodies[-1]["top_logprobs"] == 20  # the APIs' cap


def test_top_logprobs_without_extensions_map_texts_with_the_tokenizer(fake, tokenizer):
    plain = client(fake.url, model_name="fake", extensions=False, tokenizer=tokenizer)
    top2 = SamplingParams(max_tokens=2, logprobs=True, top_logprobs=2)
    ids = {c: tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in "abc"}
    fake.logprobs = {"token_logprobs": [-0.5], "top_logprobs": [{"a": -0.5, "b": -0.1, "c": -2.0}]}
    out = plain.generate([[1, 2]], top2)[0].completions[0]
    assert out.top_logprobs == [{ids["b"]: -0.1, ids["a"]: -0.5}]
    assert fake.bodies[-1]["logprobs"] == 2 and "return_tokens_as_token_ids" not in fake.bodies[-1]
    fake.logprobs = {"token_logprobs": [-0.5], "top_logprobs": [{"a": -0.5, "ab": -0.1}]}
    with pytest.raises(EngineError, match=r"token 'ab'.*2 ids.*extensions=true"):
        plain.generate([[1, 2]], top2)
    sent = len(fake.bodies)
    with pytest.raises(ValueError, match="needs the model's tokenizer.*extensions=true"):
        client(fake.url, model_name="fake", extensions=False).generate([[1, 2]], top2)
    assert len(fake.bodies) == sent  # refused before sending


# against toolbox serve (the torch engine behind it) ------------------------------------------------
@pytest.fixture(scope="module")
def toolbox_server(model_dir, tmp_path_factory):
    srv = start_server(model_dir, free_port(), tmp_path_factory.mktemp("serve_http") / "log")
    yield srv
    assert srv.stop() == 0, srv.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def torch_engine(model, tokenizer):
    engine = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    yield engine
    engine.shutdown()


def assert_same_tops(theirs, mine) -> None:
    """Per token the same k ids in the same order (most likely first), log-probs within 1e-4."""
    assert theirs is not None and mine is not None and len(theirs) == len(mine) > 0
    for a, b in zip(theirs, mine, strict=True):
        assert list(a) == list(b)
        torch.testing.assert_close(
            torch.tensor(list(a.values())), torch.tensor(list(b.values())), atol=1e-4, rtol=0
        )


def _streamed(engine, prompt, params):
    async def run():
        return [d async for d in engine.stream(prompt, params)]

    deltas = asyncio.run(run())
    ids = [t for d in deltas for t in d.token_ids]
    tops = [top for d in deltas if d.top_logprobs for top in d.top_logprobs]
    return ids, tops, "".join(d.text for d in deltas)


def check_top_logprobs_equal_ours(http, ours, completions_k: int, ids_answered: bool) -> None:
    """The http engine's top-k (completions, chat, async, stream) equal the torch engine's, greedy.
    ``ids_answered``: the server answers the generated ids (vLLM's ``return_token_ids``); else the
    engine re-tokenizes the text, which drops special tokens, and the greedy top-1s give the ids."""
    params = SamplingParams(max_tokens=12, temperature=0.0, logprobs=True, top_logprobs=completions_k)
    theirs, mine = http.generate(PROMPTS, params), ours.generate(PROMPTS, params)
    for a, b in zip(theirs, mine, strict=True):
        a, b = a.completions[0], b.completions[0]
        assert a.text == b.text and (a.token_ids == b.token_ids or not ids_answered)
        assert_same_tops(a.top_logprobs, b.top_logprobs)
        assert [next(iter(top)) for top in a.top_logprobs] == b.token_ids  # greedy: the top-1 is chosen
        assert all(len(t) == completions_k for t in a.top_logprobs)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    one = asyncio.run(http.generate_async(PROMPTS[0], params)).completions[0]
    assert_same_tops(one.top_logprobs, mine[0].completions[0].top_logprobs)
    chat_params = SamplingParams(max_tokens=10, temperature=0.0, logprobs=True, top_logprobs=7)
    messages = [{"role": "user", "content": "hi there"}]
    a, b = (
        http.chat([messages], chat_params)[0].completions[0],
        ours.chat([messages], chat_params)[0].completions[0],
    )
    assert a.text == b.text and (a.token_ids == b.token_ids or not ids_answered)
    assert_same_tops(a.top_logprobs, b.top_logprobs)
    stream_params = SamplingParams(max_tokens=10, temperature=0.0, logprobs=True, top_logprobs=3)
    ids, tops, text = _streamed(http, PROMPTS[1], stream_params)
    whole = ours.generate([PROMPTS[1]], stream_params)[0].completions[0]
    assert text == whole.text and (ids == whole.token_ids or not ids_answered)
    assert_same_tops(tops, whole.top_logprobs)


def test_top_logprobs_through_toolbox_serve_equal_the_torch_engine(toolbox_server, torch_engine, tokenizer):
    http = ENGINES.build(
        {"name": "http", "base_url": toolbox_server.base_url, "timeout": 60}, tokenizer=tokenizer
    )
    check_top_logprobs_equal_ours(http, torch_engine, 5, ids_answered=True)
    # our server allows the completions API's 0..5: its 400 comes through
    with pytest.raises(RemoteError, match="400") as info:
        http.generate([PROMPTS[0]], SamplingParams(max_tokens=2, logprobs=True, top_logprobs=6))
    assert info.value.status == 400
    http.shutdown()


def test_top_logprobs_without_extensions_through_toolbox_serve(toolbox_server, torch_engine, tokenizer):
    """Token texts mapped to ids with the local tokenizer (every char token is one id)."""
    spec = {"name": "http", "base_url": toolbox_server.base_url, "timeout": 60, "extensions": False}
    check_top_logprobs_equal_ours(
        ENGINES.build(spec, tokenizer=tokenizer), torch_engine, 4, ids_answered=False
    )


def _post(url: str, route: str, body: dict) -> dict:
    r = httpx.post(f"{url}{route}", json={"model": "tiny", "temperature": 0, **body}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _sse_chunks(url: str, route: str, body: dict) -> list[dict]:
    r = httpx.post(
        f"{url}{route}", json={"model": "tiny", "temperature": 0, "stream": True, **body}, timeout=60
    )
    assert r.status_code == 200, r.text
    events = [line[len("data: ") :] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def check_tokens_as_ids(url: str, tokenizer) -> tuple[dict, dict]:
    """``return_tokens_as_token_ids`` on a server's raw JSON, whole and streamed: the same logprobs
    objects as without it, every token named ``token_id:{id}``; the answers with it."""
    name = {tokenizer.decode([i]): f"token_id:{i}" for i in range(len(tokenizer))}
    assert len(name) == len(tokenizer)  # a token's text names it
    completion = {"prompt": "1+2=", "max_tokens": 6, "logprobs": 3}
    plain = _post(url, "/completions", completion)["choices"][0]["logprobs"]
    as_ids = _post(url, "/completions", {**completion, "return_tokens_as_token_ids": True})["choices"][0]
    lp = as_ids["logprobs"]
    assert lp["tokens"] == [name[t] for t in plain["tokens"]]
    assert [list(top) for top in lp["top_logprobs"]] == [
        [name[t] for t in top] for top in plain["top_logprobs"]
    ]
    torch.testing.assert_close(lp["token_logprobs"], plain["token_logprobs"], atol=1e-5, rtol=0)
    # the text offsets count the token_id: names, as vLLM's do
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    chunks = _sse_chunks(url, "/completions", {**completion, "return_tokens_as_token_ids": True})
    streamed = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert [t for s in streamed for t in s["tokens"]] == lp["tokens"]
    assert [top for s in streamed for top in s["top_logprobs"]] == lp["top_logprobs"]
    assert [o for s in streamed for o in s["text_offset"]] == lp["text_offset"]

    chat = {
        "messages": [{"role": "user", "content": "hi there"}],
        "max_tokens": 6,
        "logprobs": True,
        "top_logprobs": 4,
    }
    plain_content = _post(url, "/chat/completions", chat)["choices"][0]["logprobs"]["content"]
    as_ids_chat = _post(url, "/chat/completions", {**chat, "return_tokens_as_token_ids": True})["choices"][0]
    content = as_ids_chat["logprobs"]["content"]
    assert [x["token"] for x in content] == [name[x["token"]] for x in plain_content]
    # a generated token's bytes are still those of its text; an alternative's those of its name
    assert [x["bytes"] for x in content] == [list(x["token"].encode()) for x in plain_content]
    for x, y in zip(content, plain_content, strict=True):
        assert [a["token"] for a in x["top_logprobs"]] == [name[a["token"]] for a in y["top_logprobs"]]
        assert all(a["bytes"] == list(a["token"].encode()) for a in x["top_logprobs"])
    chunks = _sse_chunks(url, "/chat/completions", {**chat, "return_tokens_as_token_ids": True})
    streamed = [
        x
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for x in c["choices"][0]["logprobs"]["content"]
    ]
    assert [(x["token"], x["bytes"]) for x in streamed] == [(x["token"], x["bytes"]) for x in content]
    assert [[a["token"] for a in x["top_logprobs"]] for x in streamed] == [
        [a["token"] for a in x["top_logprobs"]] for x in content
    ]
    return as_ids, as_ids_chat


def test_toolbox_serve_renders_tokens_as_token_ids(toolbox_server, tokenizer):
    check_tokens_as_ids(toolbox_server.base_url, tokenizer)


def check_token_ids(url: str, tokenizer) -> list:
    """``return_token_ids`` (vLLM's) on a server's raw JSON: completions carry ``token_ids`` and
    ``prompt_token_ids`` in the choice, chat ``token_ids`` in the choice and ``prompt_token_ids`` at
    the top; streamed, every chunk's choice has its ids and the first one the prompt's. Returns the
    completions choice and the chat choice."""
    prompt_ids = tokenizer("1+2=")["input_ids"]
    completion = {"prompt": "1+2=", "max_tokens": 6, "return_token_ids": True}
    choice = _post(url, "/completions", completion)["choices"][0]
    assert choice["prompt_token_ids"] == prompt_ids and len(choice["token_ids"]) == 6
    assert tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
    chunks = _sse_chunks(url, "/completions", completion)
    with_ids = [c["choices"][0] for c in chunks if c["choices"]]
    assert [t for c in with_ids for t in c["token_ids"]] == choice["token_ids"]
    assert with_ids[0]["prompt_token_ids"] == prompt_ids
    assert all(c.get("prompt_token_ids") is None for c in with_ids[1:])  # vLLM: null, ours: absent
    messages = [{"role": "user", "content": "hi there"}]
    chat = {"messages": messages, "max_tokens": 6, "return_token_ids": True}
    whole = _post(url, "/chat/completions", chat)
    chat_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if not isinstance(chat_ids, list):  # transformers 5: a BatchEncoding
        chat_ids = chat_ids["input_ids"]
    assert whole["prompt_token_ids"] == list(chat_ids) and len(whole["choices"][0]["token_ids"]) == 6
    chat_chunks = _sse_chunks(url, "/chat/completions", chat)
    assert chat_chunks[0]["prompt_token_ids"] == list(chat_ids)
    streamed = [t for c in chat_chunks if c["choices"] for t in c["choices"][0].get("token_ids") or []]
    assert streamed == whole["choices"][0]["token_ids"]  # vLLM's first chunk: the role, no ids
    return [choice, whole["choices"][0]]


def test_toolbox_serve_answers_token_ids(toolbox_server, tokenizer):
    check_token_ids(toolbox_server.base_url, tokenizer)


# against a real vLLM server -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(vllm_server, torch_engine, tokenizer):
    """The http engine on the vLLM server and our torch engine on the same weights."""
    http = ENGINES.build({"name": "http", "base_url": vllm_server, "timeout": 60}, tokenizer=tokenizer)
    yield http, torch_engine
    http.shutdown()


def _ids(outputs):
    return [[c.token_ids for c in o.completions] for o in outputs]


def test_vllm_server_greedy_ids_and_logprobs_equal_ours(served, tokenizer):
    http, ours = served
    params = SamplingParams(max_tokens=20, temperature=0.0, logprobs=True)
    theirs, mine = http.generate(PROMPTS, params), ours.generate(PROMPTS, params)
    assert _ids(theirs) == _ids(mine)
    assert [o.prompt_token_ids for o in theirs] == [tokenizer(p)["input_ids"] for p in PROMPTS]
    assert [c.text for o in theirs for c in o.completions] == [c.text for o in mine for c in o.completions]
    for a, b in zip(theirs, mine, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.completions[0].logprobs),
            torch.tensor(b.completions[0].logprobs),
            atol=1e-4,
            rtol=0,
        )
    # token ids in, and the extensions (stop ids, repetition penalty) honoured
    extra = SamplingParams(max_tokens=20, temperature=0.0, repetition_penalty=1.4, stop_token_ids=[9, 17])
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    assert _ids(http.generate(prompts, extra)) == _ids(ours.generate(prompts, extra))


def test_vllm_server_stop_strings_n_stream_and_chat(served):
    http, ours = served
    text = ours.generate([PROMPTS[3]], SamplingParams(max_tokens=24, temperature=0.0))[0].completions[0].text
    stop = SamplingParams(max_tokens=24, temperature=0.0, stop=[text[6:8]])
    a, b = (
        http.generate([PROMPTS[3]], stop)[0].completions[0],
        ours.generate([PROMPTS[3]], stop)[0].completions[0],
    )
    assert (a.text, a.finish_reason, a.token_ids) == (b.text, b.finish_reason, b.token_ids)
    sampled = http.generate([PROMPTS[0]], SamplingParams(max_tokens=8, temperature=1.0, n=3, seed=1))[0]
    assert len(sampled.completions) == 3

    async def stream():
        return [d async for d in http.stream(PROMPTS[1], SamplingParams(max_tokens=16, temperature=0.0))]

    deltas = asyncio.run(stream())
    whole = ours.generate([PROMPTS[1]], SamplingParams(max_tokens=16, temperature=0.0))[0].completions[0]
    assert "".join(d.text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.token_ids] == whole.token_ids
    messages = [{"role": "user", "content": "1+1="}]
    chat = http.chat([messages], SamplingParams(max_tokens=8, temperature=0.0))[0]
    assert (
        chat.completions[0].token_ids
        == ours.chat([messages], SamplingParams(max_tokens=8, temperature=0.0))[0].completions[0].token_ids
    )


def test_vllm_server_top_logprobs_equal_ours(served, vllm_server, toolbox_server, tokenizer):
    """Top-k through vLLM (completions k=8: vLLM has no cap of 5) equal the torch engine's, and its
    ``return_tokens_as_token_ids`` answers are the ones ``toolbox serve`` gives (greedy)."""
    http, ours = served
    check_top_logprobs_equal_ours(http, ours, 8, ids_answered=True)
    theirs, theirs_chat = check_tokens_as_ids(vllm_server, tokenizer)
    mine, mine_chat = check_tokens_as_ids(toolbox_server.base_url, tokenizer)
    a, b = theirs["logprobs"], mine["logprobs"]
    assert (theirs["text"], a["tokens"], a["text_offset"]) == (mine["text"], b["tokens"], b["text_offset"])
    assert [list(x) for x in a["top_logprobs"]] == [list(x) for x in b["top_logprobs"]]
    torch.testing.assert_close(
        [list(x.values()) for x in a["top_logprobs"]],
        [list(x.values()) for x in b["top_logprobs"]],
        atol=1e-4,
        rtol=0,
    )
    a, b = theirs_chat["logprobs"]["content"], mine_chat["logprobs"]["content"]
    strip = lambda xs: [  # noqa: E731
        (x["token"], x["bytes"], [(y["token"], y["bytes"]) for y in x["top_logprobs"]]) for x in xs
    ]
    assert strip(a) == strip(b)
    # return_token_ids: the same ids in the same places
    ours_ids, theirs_ids = (
        check_token_ids(toolbox_server.base_url, tokenizer),
        check_token_ids(vllm_server, tokenizer),
    )
    for a, b in zip(theirs_ids, ours_ids, strict=True):
        assert (a["token_ids"], a.get("prompt_token_ids")) == (b["token_ids"], b.get("prompt_token_ids"))
