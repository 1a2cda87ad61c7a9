"""``toolbox serve`` under hostile input (issue 18): huge prompts, ignored fields, odd JSON.

One server (the tiny Llama of ``conftest.py``, context 256 tokens) for the module, plus one with a
small body limit and unknown fields allowed.
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from server_util import start_server


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = start_server(model_dir, free_port(), tmp_path_factory.mktemp("hostile") / "log")
    yield srv
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


def post(server, path: str, body, timeout: float = 60, **headers) -> httpx.Response:
    if isinstance(body, bytes | str):
        return httpx.post(f"{server.base_url}{path}", content=body, headers=headers, timeout=timeout)
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=timeout)


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    for internal in ("Traceback", "TypeError", "ValueError", "pydantic", "Error:"):
        assert internal not in body["message"], body["message"]
    return body


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


# 1. one huge prompt stalls nobody -----------------------------------------------------------------
def test_a_10m_character_prompt_is_refused_at_once_and_stalls_nobody(server):
    post(server, "/chat/completions", CHAT)  # warm up
    before = rss_mb(server.proc.pid)
    big = {"model": "tiny", "prompt": "1" * 10_000_000, "max_tokens": 4}

    def timed(body):
        t = time.perf_counter()
        r = post(server, "/completions" if "prompt" in body else "/chat/completions", body)
        return r, time.perf_counter() - t

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        big_f = pool.submit(timed, big)
        time.sleep(0.05)  # the big body is on its way
        small_r, small_s = pool.submit(timed, CHAT).result()
        big_r, big_s = big_f.result()
    err = error(big_r, 413)  # over the default 8 MiB body limit: refused before it is read
    assert err["code"] == "request_too_large" and "--max-request-bytes" in err["message"]
    assert small_r.status_code == 200, small_r.text
    assert small_s < 1.0 and big_s < 1.0, (small_s, big_s)
    assert rss_mb(server.proc.pid) - before < 50, (before, rss_mb(server.proc.pid))


def test_prompts_longer_than_the_context_can_hold_are_refused_before_tokenizing(server):
    before = rss_mb(server.proc.pid)
    for body in (
        {"model": "tiny", "prompt": "1" * 5_000_000, "max_tokens": 4},
        {"model": "tiny", "prompt": ["x" * 100_000] * 64, "max_tokens": 1},
    ):
        t = time.perf_counter()
        err = error(post(server, "/completions", body), 400)
        assert time.perf_counter() - t < 1.0
        assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
        assert "characters" in err["message"]
    assert rss_mb(server.proc.pid) - before < 50


def test_huge_chat_message_is_refused_before_the_template(server):
    body = {**CHAT, "messages": [{"role": "user", "content": "y" * 3_000_000}]}
    err = error(post(server, "/chat/completions", body), 400)
    assert err["param"] == "messages" and "characters" in err["message"]


# 2. fields honoured or refused ------------------------------------------------------------------------
def test_logit_bias_is_honoured(server, tokenizer):
    a = tokenizer.convert_tokens_to_ids("a")
    body = {"model": "tiny", "prompt": "1+2=", "max_tokens": 6, "temperature": 0, "logit_bias": {str(a): 100}}
    assert post(server, "/completions", body).json()["choices"][0]["text"] == "aaaaaa"
    ban = {**body, "logit_bias": {str(a): -100}, "ignore_eos": True, "max_tokens": 30}
    plain = {**ban, "logit_bias": {}}
    assert "a" not in post(server, "/completions", ban).json()["choices"][0]["text"]
    assert post(server, "/completions", plain).status_code == 200


def test_penalties_change_output_as_the_engine_computes(server, model, tokenizer):
    from toolbox.core.registries import ENGINES
    from toolbox.serving.engine import SamplingParams

    a = tokenizer.convert_tokens_to_ids("a")
    engine = ENGINES.build({"name": "torch", "max_batch_size": 4}, model=model, tokenizer=tokenizer)
    try:
        for fields in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"presence_penalty": -2.0}):
            body = {
                "model": "tiny",
                "prompt": "1+2=",
                "max_tokens": 12,
                "temperature": 0,
                "ignore_eos": True,
                "logit_bias": {str(a): 3.0},
                **fields,
            }
            got = post(server, "/completions", body).json()["choices"][0]["text"]
            params = SamplingParams(
                max_tokens=12, temperature=0, ignore_eos=True, logit_bias={a: 3.0}, **fields
            )
            want = engine.generate(["1+2="], params)[0].completions[0].text
            without = engine.generate(
                ["1+2="], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, logit_bias={a: 3.0})
            )
            assert got == want and got != without[0].completions[0].text, (fields, got)
    finally:
        engine.shutdown()


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logit_bias": {"a": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 1e9}}, "logit_bias"),
        ({"logit_bias": {"99999": 1}}, "logit_bias"),
        ({"presence_penalty": 1e9}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"best_of": 3}, None),
        ({"suffix": "x"}, "suffix"),
        ({"echo": True}, "echo"),
        ({"foo": 1}, "foo"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
    ],
)
def test_unimplemented_or_out_of_range_fields_are_400_naming_them(server, fields, param):
    body = {"model": "tiny", "prompt": "a", "max_tokens": 2, **fields}
    err = error(post(server, "/completions", body), 400)
    if param is not None:
        assert err["param"].startswith(param), err
    assert next(iter(fields)) in err["message"], err


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user"},
        {"role": "user", "content": None},
        {"role": "user", "content": "x", "tool_call_id": "1"},
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "1", "function": {"name": "f"}}]},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "user", "content": "x", "audio": {}},
    ],
)
def test_messages_without_what_they_need_are_400(server, message):
    error(post(server, "/chat/completions", {**CHAT, "messages": [message]}), 400)


def test_chat_tool_fields_are_checked(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    error(post(server, "/chat/completions", {**CHAT, "tool_choice": "required"}), 400)
    named = {"type": "function", "function": {"name": "g"}}
    err = error(post(server, "/chat/completions", {**CHAT, "tools": tools, "tool_choice": named}), 400)
    assert "'g'" in err["message"]


# 3. error shapes ----------------------------------------------------------------------------------------
def test_odd_json_is_400_in_words_of_the_request(server):
    err = error(post(server, "/completions", b"", **{"Content-Type": "application/json"}), 400)
    assert "no body" in err["message"]
    surrogate = b'{"model": "tiny", "prompt": "\\ud800", "max_tokens": 2}'
    err = error(post(server, "/completions", surrogate, **{"Content-Type": "application/json"}), 400)
    assert "surrogate" in err["message"] and err["param"] == "prompt"
    nan = b'{"model": "tiny", "prompt": "a", "temperature": NaN}'
    err = error(post(server, "/completions", nan, **{"Content-Type": "application/json"}), 400)
    assert "NaN" in err["message"]
    error(post(server, "/completions", b"[1, 2]", **{"Content-Type": "application/json"}), 400)


def test_schema_valid_empty_strings_get_a_documented_status(server):
    r = post(server, "/completions", {"model": "", "prompt": ""})
    err = error(r, 404)
    assert err["code"] == "model_not_found"
    doc = httpx.get(f"{server.root}/openapi.json").json()
    assert "404" in doc["paths"]["/v1/completions"]["post"]["responses"]
    r = post(server, "/completions", {"model": "tiny", "prompt": "", "max_tokens": 2})
    assert r.status_code == 200, r.text  # bos alone is a prompt


def test_body_limit_is_413_and_unknown_fields_can_be_allowed(model_dir, tmp_path):
    srv = start_server(
        model_dir, free_port(), tmp_path / "log", "--max-request-bytes", "1000", "--allow-unknown-fields"
    )
    try:
        err = error(post(srv, "/completions", {"model": "tiny", "prompt": "a" * 2000}), 413)
        assert "1000 bytes" in err["message"]
        body = {"model": "tiny", "prompt": "a", "max_tokens": 2, "foo": 1, "stream_options": None}
        assert post(srv, "/completions", body).status_code == 200
        chat = {**CHAT, "messages": [{"role": "user", "content": "x", "extra": 1}], "metadata": {}}
        assert post(srv, "/chat/completions", chat).status_code == 200
    finally:
        assert srv.stop() == 0
