"""The http engine: retries, timeouts and SSE against a tiny fake server, then against a real vLLM server.

The fake server (``http.server`` on 127.0.0.1, in a thread) answers from a script: fail the first k
requests with 503, sleep, or always answer an error, and records what it was sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

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
                    return self._send(
                        200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
                    )
                if body.get("stream"):
                    return self._stream(body)
                choices = [
                    {
                        "index": i,
                        "text": "ok",
                        "token_ids": [7, 8],
                        "finish_reason": "length",
                        "logprobs": {"token_logprobs": [-0.5, -0.25]} if "logprobs" in body else None,
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


# against a real vLLM server -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(vllm_server, model, tokenizer):
    """The http engine on the vLLM server and our torch engine on the same weights."""
    http = ENGINES.build({"name": "http", "base_url": vllm_server, "timeout": 60}, tokenizer=tokenizer)
    ours = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    yield http, ours
    ours.shutdown()
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
