"""Fixtures of the harness tests: offline hub variables with a loopback-only network, and the
shortened demo run (trained once per session)."""

from __future__ import annotations

import socket

import pytest

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def offline(monkeypatch):
    """Hub variables offline, and any connection outside loopback an error."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in LOOPBACK and self.family != socket.AF_UNIX:
            raise AssertionError(f"network call to {address}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture(scope="session")
def demo_short(tmp_path_factory):
    """The demo config trained 500 steps (tests/eval/harness_util.py SHORT_DEMO)."""
    from tests.eval.harness_util import SHORT_DEMO
    from toolbox.cli import main

    run_dir = tmp_path_factory.mktemp("demo") / "run"
    assert main(["train", *SHORT_DEMO, f"run_dir={run_dir}"]) == 0
    return run_dir
