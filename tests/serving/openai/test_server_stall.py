"""``toolbox serve`` under hostile load (issue 37), slow: many clients at once that would stall the
event loop or hold connections. Correctness bounds only (a shared machine), no speed claims."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import resource
import select
import socket
import statistics
import time

import httpx
import pytest
from server_util import start_server

from tests.serving.conftest import free_port

pytestmark = pytest.mark.slow
SMALL = {"model": "tiny", "prompt": "1+2=", "max_tokens": 2, "temperature": 0}


SLOW_CLIENTS = 500  # the count: 500 connections sending 1 byte every 2 s
BODY_HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n"
)


@pytest.fixture(scope="module")
def enough_file_descriptors():
    """500 client sockets here and 500 accepted ones in the server (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * SLOW_CLIENTS
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"needs {want} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory, enough_file_descriptors):
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


def closed_by_server(s: socket.socket, got: dict) -> bool:
    """Whether the server has closed ``s`` (what it sent before, kept in ``got``); never blocks."""
    ready = select.poll()
    ready.register(s, select.POLLIN)
    while ready.poll(0):
        try:
            chunk = s.recv(65536)
        except OSError:  # reset: it closed and our next byte hit the closed socket
            return True
        if not chunk:
            return True
        got[s] = got.get(s, b"") + chunk
    return False


def trickle(server, first: bytes) -> None:
    """SLOW_CLIENTS connections that send ``first`` then 1 byte every 2 s: every one must be
    answered 408 and closed by the server (timeouts 3 s) while a small request is still served."""
    socks = []
    for _ in range(SLOW_CLIENTS):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(first)
        socks.append(s)
    got: dict = {}
    deadline = time.monotonic() + 20
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        assert small_latency(server) < 10
        still = []
        for s in open_:
            if closed_by_server(s, got):
                continue
            try:
                s.sendall(b" ")
                still.append(s)
            except OSError:
                pass
        open_ = still
        if open_:
            time.sleep(2)
    for s in socks:
        s.close()
    assert len(open_) == 0, (
        f"{len(open_)} of {SLOW_CLIENTS} slow connections still open after 20 s (timeouts 3 s)"
    )
    answers = [got.get(s, b"")[:12] for s in socks]
    assert answers.count(b"HTTP/1.1 408") == SLOW_CLIENTS, collections.Counter(answers)
    assert small_latency(server) < 10


def test_500_clients_trickling_their_headers_are_closed_and_others_served(server):
    trickle(server, b"P")


def test_500_clients_trickling_their_bodies_are_closed_and_others_served(server):
    before = len(server.log.read_text().splitlines())
    trickle(server, BODY_HEAD + b'{"model": "tiny", ')
    lines = server.log.read_text().splitlines()[before:]
    slow = [line for line in lines if "then too slowly: answered 408" in line]
    assert len(slow) == SLOW_CLIENTS, (len(slow), lines[:5])


def test_500_clients_leaving_mid_body_are_one_line_each(server):
    before = len(server.log.read_text().splitlines())
    for _ in range(SLOW_CLIENTS):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": "tiny"'
        )
        s.close()
    time.sleep(2)
    small_latency(server)
    lines = server.log.read_text().splitlines()[before:]
    assert 0 < len(lines) <= SLOW_CLIENTS and all(
        "left before sending its whole request body" in x for x in lines
    ), lines[:5]
