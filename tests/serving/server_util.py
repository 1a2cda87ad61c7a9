"""Start ``toolbox serve`` for the server tests: a subprocess on a free loopback port, stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.root = f"http://127.0.0.1:{port}"

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM by PID; the exit code (SIGKILL after ``timeout``)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


def start_server(
    model_dir: Path, port: int, log: Path, *args: str, ready_timeout: float = 120
) -> ServerProcess:
    cmd = [
        sys.executable,
        "-m",
        "toolbox.cli",
        "serve",
        f"model={model_dir}",
        "engine.num_threads=1",
        *[a for a in args if "=" in a and not a.startswith("-")],
        "--served-model-name",
        "tiny",
        "--port",
        str(port),
        *[a for a in args if not ("=" in a and not a.startswith("-"))],
    ]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
    server = ServerProcess(proc, port, log)
    deadline = time.monotonic() + ready_timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"toolbox serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.root}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop(5)
            raise RuntimeError(f"toolbox serve was not ready within {ready_timeout} s; log: {log}")
        time.sleep(0.3)
