"""Load test of ``toolbox serve`` (bounded: 2 rounds of 200 requests of 24 tokens, loopback only).

200 concurrent streaming clients, 10 % of them disconnecting after a few chunks: the server stays up,
every finished stream is well formed (one chunk per token, usage, ``[DONE]``), and its memory comes
back: the RSS after the second round is within 32 MiB of the RSS after the first (no growth per
round of 200 requests), and within 150 MiB of the idle baseline measured before any load.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import psutil
from server_util import start_server

from tests.serving.conftest import free_port

CLIENTS = 200
DISCONNECT_EVERY = 10  # 10 %
TOKENS = 24


async def one_client(client: httpx.AsyncClient, url: str, i: int) -> dict:
    disconnect = i % DISCONNECT_EVERY == 0
    body = {
        "model": "tiny",
        "prompt": f"{i % 10}+{i % 7}=",
        "max_tokens": 200 if disconnect else TOKENS,  # long, so the client leaves mid-stream
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events: list[str] = []
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            return {"status": r.status_code, "body": (await r.aread()).decode()}
        async for line in r.aiter_lines():
            if line:
                events.append(line)
            if disconnect and len(events) >= 3:
                return {"status": 200, "disconnected": True}
    return {"status": 200, "events": events}


def check_stream(events: list[str]) -> None:
    assert events[-1] == "data: [DONE]", events[-3:]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    with_choices = [c for c in chunks if c["choices"]]
    assert len(with_choices) == TOKENS
    assert with_choices[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in with_choices[:-1])
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == TOKENS


async def round_of_clients(base_url: str) -> list[dict]:
    limits = httpx.Limits(max_connections=CLIENTS + 10, max_keepalive_connections=CLIENTS + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(
            *[one_client(client, f"{base_url}/completions", i) for i in range(CLIENTS)]
        )


def settle(server) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = httpx.get(f"{server.root}/metrics").text
        if "toolbox_http_requests_in_flight 0" in text and "toolbox_num_requests_running 0" in text:
            return
        time.sleep(0.2)
    raise AssertionError("requests still in flight 30 s after the load")


def test_200_streaming_clients_with_disconnects(model_dir, tmp_path):
    srv = start_server(model_dir, free_port(), tmp_path / "log", "engine.max_batch_size=32")
    try:
        proc = psutil.Process(srv.proc.pid)
        httpx.post(f"{srv.base_url}/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 4})
        idle = proc.memory_info().rss
        rss = []
        for _ in range(2):
            t0 = time.monotonic()
            results = asyncio.run(round_of_clients(srv.base_url))
            elapsed = time.monotonic() - t0
            assert elapsed < 120
            assert all(r["status"] == 200 for r in results), [r for r in results if r["status"] != 200][:3]
            finished = [r for r in results if not r.get("disconnected")]
            assert len(finished) == CLIENTS - CLIENTS // DISCONNECT_EVERY
            for r in finished:
                check_stream(r["events"])
            settle(srv)
            assert httpx.get(f"{srv.root}/health").status_code == 200
            rss.append(proc.memory_info().rss)
        mib = 2**20
        assert rss[1] - rss[0] < 32 * mib, (idle / mib, [r / mib for r in rss])
        assert rss[1] - idle < 150 * mib, (idle / mib, [r / mib for r in rss])
        print(f"RSS MiB: idle {idle / mib:.1f}, after rounds {[round(r / mib, 1) for r in rss]}")
        metrics = httpx.get(f"{srv.root}/metrics").text
        line = next(x for x in metrics.splitlines() if x.startswith("toolbox_client_disconnects_total "))
        # a client may close after the server already sent its whole (short) stream
        assert 0 < float(line.split()[-1]) <= 2 * CLIENTS // DISCONNECT_EVERY
    finally:
        assert srv.stop() == 0
