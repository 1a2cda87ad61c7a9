"""``toolbox bench serve``: its metric definitions (vLLM's), its load model, its CLI against
``toolbox serve``, and agreement with vLLM's own ``vllm bench serve`` on a real vLLM server."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, free_port
from server_util import start_server

from toolbox.serving.bench import (
    BenchConfig,
    RequestResult,
    arrival_delays,
    calculate_metrics,
    parse_goodput,
    run_benchmark,
)


def test_metric_definitions_match_vllm():
    ok = RequestResult(True, prompt_len=4, output_tokens=5, ttft=0.1, latency=0.5, itl=[0.1] * 4)
    one = RequestResult(True, prompt_len=3, output_tokens=1, ttft=0.2, latency=0.2, itl=[])
    bad = RequestResult(False, error="x")
    m = calculate_metrics([ok, one, bad], duration=2.0, percentiles=[50, 99], goodput={"ttft": 150})
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["total_output_tokens"] == 6 and m["total_input_tokens"] == 7
    assert m["mean_tpot_ms"] == pytest.approx(100.0)  # (0.5 - 0.1) / (5 - 1); one-token requests excluded
    assert m["mean_ttft_ms"] == pytest.approx(150.0)
    assert m["mean_itl_ms"] == pytest.approx(100.0)
    assert m["mean_e2el_ms"] == pytest.approx(350.0)
    assert m["output_throughput"] == pytest.approx(3.0) and m["request_throughput"] == pytest.approx(1.0)
    assert m["request_goodput"] == pytest.approx(0.5)  # only the 100 ms TTFT meets 150 ms
    assert m["p99_ttft_ms"] == pytest.approx(np.percentile([100, 200], 99))
    assert parse_goodput(["ttft:100", "tpot:5"]) == {"ttft": 100.0, "tpot": 5.0}


def test_arrivals_gamma_and_poisson():
    assert arrival_delays(5, math.inf, 1.0) == [0.0] * 5
    d = arrival_delays(400, 20.0, 1.0, seed=1)
    assert d[-1] == pytest.approx(400 / 20.0)  # rescaled as vLLM does
    gaps = np.diff(d)
    assert 0.7 < np.std(gaps) / np.mean(gaps) < 1.3  # exponential: cv ~ 1
    bursty = np.diff(arrival_delays(400, 20.0, 0.25, seed=1))
    assert np.std(bursty) / np.mean(bursty) > 1.5  # burstiness < 1: cv = 1/sqrt(k) = 2
    assert arrival_delays(3, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5])


@pytest.fixture(scope="module")
def our_server(model_dir, tmp_path_factory):
    srv = start_server(model_dir, free_port(), tmp_path_factory.mktemp("bench") / "log")
    yield srv
    assert srv.stop() == 0


def test_cli_against_toolbox_serve(our_server, model_dir, tmp_path):
    out, plot = tmp_path / "bench.json", tmp_path / "latency.png"
    cmd = [
        sys.executable, "-m", "toolbox.cli", "bench", "serve",
        "--base-url", our_server.base_url, "--num-prompts", "24", "--max-concurrency", "4",
        "--request-rate", "50", "--burstiness", "0.5", "--random-input-len", "16",
        "--random-output-len", "8", "--ignore-eos", "--tokenizer", str(model_dir),
        "--goodput", "ttft:10000", "tpot:10000", "--percentiles", "50,90", "--num-warmups", "2",
        "--out", str(out), "--plot", str(plot),
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Output token throughput" in r.stdout
    res = json.loads(out.read_text())
    assert res["completed"] == 24 and res["failed"] == 0
    assert res["total_output_tokens"] == 24 * 8
    assert res["total_input_tokens"] == 24 * (16 + 1)  # + bos
    assert res["request_goodput"] == pytest.approx(res["request_throughput"])
    for k in ("p50_ttft_ms", "p90_tpot_ms", "p99_itl_ms", "median_e2el_ms", "std_ttft_ms"):
        assert k in res
    assert plot.stat().st_size > 10_000


def test_jsonl_dataset(our_server, model_dir, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": p, "output_len": 5}) for p in ["1+1=", "2+2=", "3+3="]))
    cfg = BenchConfig(
        base_url=our_server.base_url, num_prompts=6, dataset="jsonl", dataset_path=str(data),
        tokenizer=str(model_dir), ignore_eos=True, max_concurrency=2,
    )  # fmt: skip
    res = asyncio.run(run_benchmark(cfg))
    assert res["completed"] == 6 and res["total_output_tokens"] == 30


VLLM_LOAD = [
    "--num-prompts",
    "60",
    "--max-concurrency",
    "4",
    "--random-input-len",
    "32",
    "--random-output-len",
    "32",
]


@pytest.mark.slow
def test_agrees_with_vllm_bench_serve(vllm_server, model_dir, run_in_vllm_env, tmp_path):
    """Same vLLM server, same load: our TTFT, TPOT and output throughput within 15 % of vLLM's."""
    ours_cfg = BenchConfig(
        base_url=vllm_server, num_prompts=40, max_concurrency=1, random_input_len=32,
        random_output_len=32, ignore_eos=True, tokenizer=str(model_dir), num_warmups=4,
    )  # fmt: skip
    script = REPO / "toolbox" / "serving" / "bench_vllm.py"
    vllm_args = [
        "--base-url", vllm_server.removesuffix("/v1"), "--model", "tiny", "--tokenizer", str(model_dir),
        "--dataset-name", "random", *VLLM_LOAD, "--ignore-eos", "--num-warmups", "4", "--disable-tqdm",
    ]  # fmt: skip
    pairs = []
    for _ in range(2):  # interleaved, so a busy machine affects both alike
        ours = asyncio.run(run_benchmark(ours_cfg))
        r = run_in_vllm_env(script, *vllm_args, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        pairs.append((ours, theirs))
    for key in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput"):
        a = float(np.mean([o[key] for o, _ in pairs]))
        b = float(np.mean([t[key] for _, t in pairs]))
        print(f"{key}: ours {a:.2f} vllm {b:.2f} ratio {a / b:.3f}")
        assert abs(a - b) / b < 0.15, (key, a, b)
    assert all(o["completed"] == 40 and t["completed"] == 40 for o, t in pairs)
