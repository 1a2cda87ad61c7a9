"""``toolbox serve`` against the official ``openai`` client: a subprocess on a free loopback port
(stopped by PID with SIGTERM) serving the tiny Llama of ``conftest.py`` with the torch engine."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from conftest import free_port
from server_util import start_server

KEY = "sk-test-key"


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = start_server(model_dir, free_port(), tmp_path_factory.mktemp("serve") / "log", "--api-key", KEY)
    yield srv
    code = srv.stop()
    assert code == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)


def raw(server, path: str, body, key: str | None = KEY, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, bytes | str):
        return httpx.post(f"{server.base_url}{path}", content=body, headers={**headers, **kw}, timeout=60)
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=60)


def assert_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert "Traceback" not in r.text
    return body["error"]


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_greedy_matches_the_engine(client, model, tokenizer):
    import torch

    from toolbox.core.registries import ENGINES
    from toolbox.serving.engine import SamplingParams

    out = client.completions.create(model="tiny", prompt="1+2=", max_tokens=12, temperature=0)
    assert out.object == "text_completion" and len(out.choices) == 1
    c = out.choices[0]
    assert c.finish_reason in ("stop", "length")
    engine = ENGINES.build({"name": "torch", "max_batch_size": 2}, model=model, tokenizer=tokenizer)
    try:
        with torch.no_grad():
            ref = engine.generate(["1+2="], SamplingParams(max_tokens=12, temperature=0))[0].completions[0]
    finally:
        engine.shutdown()
    assert c.text == ref.text
    assert out.usage.completion_tokens == len(ref.token_ids)
    assert out.usage.prompt_tokens == len(tokenizer("1+2=")["input_ids"])


def test_chat_and_streaming_agree(client):
    msgs = [{"role": "user", "content": "hello"}]
    whole = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, temperature=0)
    assert whole.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(
        model="tiny",
        messages=msgs,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == whole.choices[0].finish_reason


def test_stream_ends_with_done(server):
    body = {"model": "tiny", "prompt": "ab", "max_tokens": 5, "stream": True}
    with httpx.stream(
        "POST", f"{server.base_url}/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    for e in events[:-1]:
        assert json.loads(e.removeprefix("data: "))["object"] == "text_completion"


def test_n_and_seed(client):
    a = client.completions.create(model="tiny", prompt="abc", max_tokens=8, n=3, seed=7, temperature=1.0)
    b = client.completions.create(model="tiny", prompt="abc", max_tokens=8, n=3, seed=7, temperature=1.0)
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # seeded: reproducible
    stream = client.completions.create(model="tiny", prompt="abc", max_tokens=6, n=2, seed=7, stream=True)
    texts = {0: "", 1: ""}
    for ch in stream:
        for c in ch.choices:
            texts[c.index] += c.text
    assert set(texts) == {0, 1}
    assert texts[0] == a.choices[0].text[: len(texts[0])]


def test_multiple_prompts(client):
    out = client.completions.create(model="tiny", prompt=["ab", "cd"], max_tokens=4, n=2, temperature=0)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]


def test_stop_string(client):
    free = client.completions.create(model="tiny", prompt="hello", max_tokens=20, temperature=0, stop=None)
    text = free.choices[0].text
    assert len(text) >= 3, text
    stop = text[2]
    cut = text[: text.index(stop)]
    out = client.completions.create(model="tiny", prompt="hello", max_tokens=20, temperature=0, stop=[stop])
    assert out.choices[0].text == cut
    assert out.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model="tiny", prompt="hello", max_tokens=20, temperature=0, stop=stop, stream=True
    )
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == cut


def _model_logprobs(model, prompt_ids: list[int], token_ids: list[int]):
    """log_softmax of the model's logits at each generated position (a direct forward)."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + token_ids])).logits[0, len(prompt_ids) - 1 : -1]
    return logits.float().log_softmax(-1)


def _check_steps(model, tokenizer, prompt_ids, steps, k: int) -> None:
    """``steps``: (token text, its logprob, [(alternative text, logprob), ...]) per generated token.
    The alternatives are the model's true top-k, most likely first, and the chosen token's entry
    (if it is among them) equals its logprob."""
    import torch

    ids = {tokenizer.decode([i]): i for i in range(len(tokenizer))}
    assert len(ids) == len(tokenizer)  # a token's text names it
    token_ids = [ids[text] for text, _, _ in steps]
    reference = _model_logprobs(model, prompt_ids, token_ids)
    for (text, lp, top), ref in zip(steps, reference, strict=True):
        assert lp == pytest.approx(float(ref[ids[text]]), abs=1e-4)
        values, top_ids = ref.topk(k)
        assert [ids[t] for t, _ in top] == top_ids.tolist()
        torch.testing.assert_close(torch.tensor([v for _, v in top]), values, atol=1e-4, rtol=0)
        assert all(a[1] >= b[1] for a, b in zip(top, top[1:], strict=False))
        if text in dict(top):
            assert dict(top)[text] == lp


def test_completion_top_logprobs_are_the_model_top_k(client, model, tokenizer):
    prompt_ids = tokenizer("1+2=")["input_ids"]
    kw = dict(model="tiny", prompt="1+2=", max_tokens=6, temperature=0.8, seed=5, logprobs=3)
    whole = client.completions.create(**kw).choices[0].logprobs
    chunks = [c.choices[0].logprobs for c in client.completions.create(**kw, stream=True) if c.choices]
    chunks = [c for c in chunks if c is not None]
    streamed = [
        (t, lp, top)
        for c in chunks
        for t, lp, top in zip(c.tokens, c.token_logprobs, c.top_logprobs, strict=True)
    ]
    assert [t for t, _, _ in streamed] == whole.tokens  # the same seed: the same completion
    assert [off for c in chunks for off in c.text_offset] == whole.text_offset
    assert whole.text_offset == [sum(len(t) for t in whole.tokens[:i]) for i in range(len(whole.tokens))]
    for steps in (zip(whole.tokens, whole.token_logprobs, whole.top_logprobs, strict=True), streamed):
        steps = list(steps)
        for text, lp, top in steps:  # the top 3, and the chosen token if it is not among them
            assert top[text] == lp and len(top) == (3 if list(top).index(text) < 3 else 4)
        _check_steps(
            model, tokenizer, prompt_ids, [(t, lp, list(top.items())[:3]) for t, lp, top in steps], 3
        )
    zero = client.completions.create(model="tiny", prompt="ab", max_tokens=4, temperature=0, logprobs=0)
    lp = zero.choices[0].logprobs
    assert len(lp.token_logprobs) == zero.usage.completion_tokens == len(lp.tokens)
    assert lp.top_logprobs == [{t: x} for t, x in zip(lp.tokens, lp.token_logprobs, strict=True)]


def test_chat_top_logprobs_are_the_model_top_k(client, model, tokenizer):
    from types import SimpleNamespace

    from toolbox.serving.engine import InferenceEngine

    msgs = [{"role": "user", "content": "hi there"}]
    prompt_ids = InferenceEngine.encode_chat(
        SimpleNamespace(tokenizer=tokenizer), msgs
    )  # the server's prompt
    kw = dict(
        model="tiny", messages=msgs, max_tokens=6, temperature=0.8, seed=2, logprobs=True, top_logprobs=7
    )
    whole = client.chat.completions.create(**kw)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    streamed = [
        x for c in client.chat.completions.create(**kw, stream=True) if c.choices and c.choices[0].logprobs
        for x in c.choices[0].logprobs.content
    ]  # fmt: skip
    assert [x.token for x in streamed] == [x.token for x in content]
    for entries in (content, streamed):
        assert all(len(x.top_logprobs) == 7 and x.bytes == list(x.token.encode()) for x in entries)
        steps = [(x.token, x.logprob, [(a.token, a.logprob) for a in x.top_logprobs]) for x in entries]
        _check_steps(model, tokenizer, prompt_ids, steps, 7)
    plain = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, logprobs=True)
    assert all(x.top_logprobs == [] for x in plain.choices[0].logprobs.content)
    assert (
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=3).choices[0].logprobs is None
    )


@pytest.mark.parametrize(
    "bad",
    [{"logprobs": True, "top_logprobs": 21}, {"top_logprobs": 2}, {"logprobs": True, "top_logprobs": -1}],
)
def test_bad_chat_logprobs_are_400(server, bad):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, **bad}
    assert_error(raw(server, "/chat/completions", body), 400)


def test_temperature_top_p_max_tokens(client):
    out = client.completions.create(
        model="tiny",
        prompt="a",
        max_tokens=7,
        temperature=0.7,
        top_p=0.9,
        seed=1,
        extra_body={"ignore_eos": True},
    )
    assert out.usage.completion_tokens == 7 and out.choices[0].finish_reason == "length"


# errors -------------------------------------------------------------------------------------------
def test_api_key(server):
    assert assert_error(raw(server, "/completions", {"model": "tiny", "prompt": "a"}, key=None), 401)
    assert assert_error(raw(server, "/completions", {"model": "tiny", "prompt": "a"}, key="wrong"), 401)
    bad = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(f"{server.root}/health").status_code == 200  # open without the key


def test_malformed_json(server):
    err = assert_error(raw(server, "/completions", b"{not json", **{"Content-Type": "application/json"}), 400)
    assert err["type"] == "invalid_request_error"
    assert_error(raw(server, "/chat/completions", b"[1, 2", **{"Content-Type": "application/json"}), 400)


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:  # OpenAI's answer to an unknown model
        client.completions.create(model="nope", prompt="a")
    assert e.value.body["param"] == "model"


def test_prompt_longer_than_context(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="a" * 400, max_tokens=2)
    assert "context" in e.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a" * 400}])
    with pytest.raises(openai.BadRequestError):  # prompt + max_tokens beyond the context
        client.completions.create(model="tiny", prompt="a" * 200, max_tokens=100)


@pytest.mark.parametrize(
    "bad",
    [
        {"temperature": -1},
        {"temperature": 3},
        {"top_p": 0},
        {"top_p": 1.5},
        {"n": 0},
        {"n": 1000},
        {"max_tokens": 0},
        {"max_tokens": "many"},
        {"logprobs": 99},
        {"logprobs": 6},
        {"logprobs": -1},
        {"stop": [""]},
        {"prompt": 123},
        {"prompt": []},
        {"prompt": [10**9]},
        {"seed": -1},
        {"echo": True},
    ],
)
def test_bad_parameters_are_400(server, bad):
    body = {"model": "tiny", "prompt": "a", "max_tokens": 2, **bad}
    assert_error(raw(server, "/completions", body), 400)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "tiny"},
        {"model": "tiny", "messages": []},
        {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]},
        {"model": "tiny", "messages": "hi"},
        {"messages": [{"role": "user", "content": "x"}]},
    ],
)
def test_bad_chat_requests_are_400(server, body):
    assert_error(raw(server, "/chat/completions", body), 400)


def test_unknown_route_is_openai_style(server):
    r = httpx.get(f"{server.base_url}/nothing", headers={"Authorization": f"Bearer {KEY}"})
    assert_error(r, 404)
    assert_error(httpx.get(f"{server.base_url}/completions", headers={"Authorization": f"Bearer {KEY}"}), 405)


def test_disconnect_cancels_generation(server):
    body = {"model": "tiny", "prompt": "a", "max_tokens": 200, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    before = metric(server, "toolbox_client_disconnects_total")
    with httpx.stream("POST", f"{server.base_url}/completions", json=body, headers=headers) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(4)]
    assert got[0].startswith("data: ")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (
            metric(server, "toolbox_client_disconnects_total") > before
            and metric(server, "toolbox_num_requests_running") == 0
        ):
            break
        time.sleep(0.1)
    assert metric(server, "toolbox_client_disconnects_total") == before + 1
    assert metric(server, "toolbox_num_requests_running") == 0


def metric(server, name: str) -> float:
    text = httpx.get(f"{server.root}/metrics").text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def test_metrics(server, client):
    client.completions.create(model="tiny", prompt="a", max_tokens=3, stream=True).close()
    list(client.completions.create(model="tiny", prompt="a", max_tokens=3, stream=True))
    bad = httpx.post(
        f"{server.base_url}/completions",
        json={"model": "tiny", "prompt": "a", "max_tokens": -1},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert bad.status_code == 400  # counted under status="400" (not left to another test's order)
    text = httpx.get(f"{server.root}/metrics").text
    for name in (
        'toolbox_requests_total{endpoint="completions",status="200"}',
        'toolbox_requests_total{endpoint="completions",status="400"}',
        "toolbox_prompt_tokens_total",
        "toolbox_generation_tokens_total",
        "toolbox_time_to_first_token_seconds_bucket",
        "toolbox_time_per_output_token_seconds_count",
        "toolbox_num_requests_waiting",
        "toolbox_num_requests_running",
    ):
        assert name in text, name
    assert metric(server, "toolbox_generation_tokens_total") > 0


# queue limit and shutdown: their own servers --------------------------------------------------------
def test_queue_full_is_429(model_dir, tmp_path):
    srv = start_server(
        model_dir, free_port(), tmp_path / "log", "engine.max_batch_size=1", "--max-queue", "1"
    )
    try:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 60, "ignore_eos": True}
        codes: list[int] = []

        def go():
            codes.append(httpx.post(f"{srv.base_url}/completions", json=body, timeout=60).status_code)

        threads = [threading.Thread(target=go) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert 429 in codes and 200 in codes, codes
        assert set(codes) <= {200, 429}
        r = httpx.post(f"{srv.base_url}/completions", json=body, timeout=60)
        assert r.status_code == 200  # served again once the queue drained
    finally:
        assert srv.stop() == 0


def test_sigterm_drains_requests_in_flight(model_dir, tmp_path):
    srv = start_server(model_dir, free_port(), tmp_path / "log")
    result: dict = {}

    def long_request():
        body = {"model": "tiny", "prompt": "a", "max_tokens": 150, "ignore_eos": True}
        r = httpx.post(f"{srv.base_url}/completions", json=body, timeout=120)
        result["status"], result["body"] = r.status_code, r.json()

    t = threading.Thread(target=long_request)
    t.start()
    deadline = time.monotonic() + 20
    while metric(srv, "toolbox_http_requests_in_flight") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    code = srv.stop()
    t.join(timeout=60)
    assert code == 0
    assert result["status"] == 200
    assert result["body"]["usage"]["completion_tokens"] == 150
