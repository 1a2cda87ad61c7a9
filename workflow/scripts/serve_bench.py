"""The serve-bench stage: serve a trained model with ``toolbox serve`` on a free loopback port, run
``toolbox bench serve`` against it, stop the server by PID (SIGTERM: it drains first) and write the
benchmark's JSON.

    python workflow/scripts/serve_bench.py --model work/<run>/train/model --out work/<run>/bench.json
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"toolbox serve exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"toolbox serve was not ready within {timeout} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a save_pretrained folder (the run's trained model)")
    p.add_argument("--out", required=True, help="bench.json")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-concurrency", type=int, default=4)
    p.add_argument("--input-len", type=int, default=16)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--ready-timeout", type=float, default=300)
    args = p.parse_args()

    port = free_port()
    server = subprocess.Popen(
        ["toolbox", "serve", f"model={args.model}", "engine.num_threads=1", "--served-model-name", "model",
         "--host", "127.0.0.1", "--port", str(port)],
        env=dict(os.environ, TOKENIZERS_PARALLELISM="false"),
    )  # fmt: skip
    code = 1
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", server, args.ready_timeout)
        code = subprocess.call(
            ["toolbox", "bench", "serve", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "model",
             "--tokenizer", args.model, "--num-prompts", str(args.num_prompts),
             "--max-concurrency", str(args.max_concurrency), "--random-input-len", str(args.input_len),
             "--random-output-len", str(args.output_len), "--ignore-eos", "--num-warmups", "2",
             "--out", args.out],
        )  # fmt: skip
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
                server.wait()
    return code


if __name__ == "__main__":
    sys.exit(main())
