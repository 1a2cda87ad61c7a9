"""``toolbox serve`` under hostile load (issue 37), slow: many clients at once that would stall the
event loop or hold connections. Correctness bounds only (a shared machine), no speed claims."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import statistics
import time

import httpx
import pytest
from conftest import free_port
from server_util import start_server

pytestmark = pytest.mark.slow
SMALL = {"model": "tiny", "prompt": "1+2=", "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = start_server(
        model_dir, free_port(), tmp_path_factory.mktemp("stall") / "log",
        "--header-timeout", "3", "--body-timeout", "3",
    )  # fmt: skip
    yield srv
    assert srv.stop() == 0, srv.log.read_text()[-3000:]
    assert "Traceback" not in srv.log.read_text()


def small_latency(server) -> float:
    t = time.perf_counter()
    r = httpx.post(f"{server.base_url}/completions", json=SMALL, timeout=60)
    assert r.status_code == 200, r.text
    return time.perf_counter() - t


def test_8_token_list_bodies_leave_a_small_request_under_2x_its_baseline(server):
    for _ in range(3):
        small_latency(server)  # warm up
    baseline = statistics.median(small_latency(server) for _ in range(7))
    big = json.dumps({"model": "tiny", "prompt": [5] * 2_000_000, "max_tokens": 4}).encode()

    def send_big() -> int:
        return httpx.post(
            f"{server.base_url}/completions", content=big, headers={"Content-Type": "application/json"},
            timeout=120,
        ).status_code  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        bigs = [pool.submit(send_big) for _ in range(8)]
        time.sleep(0.05)
        during = statistics.median(small_latency(server) for _ in range(5))
        assert [f.result() for f in bigs] == [413] * 8
    assert during < 2 * baseline, (during, baseline)


def test_hundreds_of_slow_clients_are_closed_and_others_served(server):
    socks = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(b"P")
        socks.append(s)
    deadline = time.monotonic() + 12
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        assert small_latency(server) < 10
        still = []
        for s in open_:
            try:
                s.sendall(b"O")
                still.append(s)
            except OSError:
                s.close()
        open_ = still
        time.sleep(2)
    for s in open_:
        s.close()
    assert not open_, f"{len(open_)} slow connections still open after 12 s (header timeout 3 s)"


def test_hundreds_of_clients_leaving_mid_body_are_one_line_each(server):
    before = len(server.log.read_text().splitlines())
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": "tiny"'
        )
        s.close()
    time.sleep(2)
    small_latency(server)
    lines = server.log.read_text().splitlines()[before:]
    assert 0 < len(lines) <= 200 and all("left before sending its whole request body" in x for x in lines), (
        lines[:5]
    )
