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
from conftest import REPO, free_port, make_bench_model, running_vllm_server
from server_util import start_server

from toolbox.serving.bench.serve import (
    BenchConfig,
    RequestResult,
    arrival_delays,
    calculate_metrics,
    jsonl_requests,
    parse_goodput,
    random_requests,
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


def test_datasets_lengths_and_order_as_vllm(tokenizer, tmp_path):
    """Random prompts: ``input_len`` counts the BOS (the server sees exactly that many tokens), the
    range ratio bounds both lengths as vLLM's; JSONL: vLLM's ``output_tokens`` field, and file order
    with ``shuffle=False`` (``--disable-shuffle``)."""
    fixed = random_requests(20, 32, 16, tokenizer, seed=1)
    assert {len(tokenizer(r.prompt)["input_ids"]) for r in fixed} == {r.prompt_len for r in fixed} == {32}
    assert {r.output_len for r in fixed} == {16}
    varied = random_requests(200, 33, 20, tokenizer, seed=1, range_ratio=0.5)
    assert {r.prompt_len for r in varied} <= set(range(1 + 16, 1 + 48 + 1))  # 32 +- 50 %, + bos
    assert min(r.output_len for r in varied) == 10 and max(r.output_len for r in varied) == 30
    data = tmp_path / "p.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{i}+{i}=", "output_tokens": i + 1}) + "\n" for i in range(5))
    )
    ordered = jsonl_requests(str(data), 7, 99, tokenizer, shuffle=False)
    assert [r.prompt for r in ordered] == [f"{i % 5}+{i % 5}=" for i in range(7)]
    assert [r.output_len for r in ordered] == [i % 5 + 1 for i in range(7)]
    assert sorted(r.prompt for r in jsonl_requests(str(data), 5, 99, tokenizer, seed=3)) == sorted(
        r.prompt for r in ordered[:5]
    )


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
    assert res["total_input_tokens"] == 24 * 16  # as vLLM's random data set: the bos counts
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


# The load of the agreement test (on conftest.BENCH_MODEL).
ROUNDS, NUM_PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 7, 40, 4, 32, 64
AGREEMENT = ("median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "output_throughput")  # within 15 %
REPORTED = ("mean_ttft_ms", "mean_itl_ms", "mean_e2el_ms")  # printed beside them


@pytest.fixture(scope="module")
def bench_vllm_server(tmp_path_factory, tokenizer):
    """A vLLM server of its own serving the larger ``BENCH_MODEL``; yields (its /v1 URL, the model
    folder)."""
    model = make_bench_model(tokenizer)
    path = tmp_path_factory.mktemp("bench_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    with running_vllm_server(path, tmp_path_factory.mktemp("bench_vllm")) as url:
        yield url, path


@pytest.mark.slow
def test_agrees_with_vllm_bench_serve(bench_vllm_server, run_in_vllm_env, tmp_path):
    """Our ``toolbox bench serve`` and vLLM's own ``vllm bench serve`` agree within 15 % on TTFT
    (median over requests), TPOT (mean and median over requests) and output token throughput,
    measuring the same vLLM server under the same load. Mean TTFT, ITL and E2EL are printed beside them.

    The same load: both read one JSONL file of 40 prompts (32 tokens with the BOS, random non-special
    ids) in file order (vLLM: ``--dataset-name custom --skip-chat-template --disable-shuffle
    --custom-output-len -1``), each asking for exactly its row's ``output_tokens`` (32..96, mean 64;
    ``ignore_eos``), at most 4 requests in flight, all arriving at once, after the same test request
    and 4 warm-ups. The varied lengths keep requests from running in lock-step waves of 4, whose TTFT
    depends on whether the next 4 requests reach the same engine step. Both send the same streamed
    ``/v1/completions`` payload and count output tokens from the usage chunk, so the token totals
    must be equal. Both compute the metrics with the same definitions (see
    ``test_metric_definitions_match_vllm``), so what is compared here is the measurement.

    A shared, busy machine: after one unmeasured run of each tool, 7 rounds, each one run of each
    tool back to back, in alternating order (ours first, then vLLM first, ...). A metric's agreement
    is the median over the rounds of the ratio ours / vLLM within a round, so slow drift of the
    machine's load (which moves both runs of a round alike) cancels and one disturbed run cannot
    decide the outcome. Why mean TTFT is not asserted: the machine stalls now and then for 100-800 ms,
    and a stall delays the first token of every request in flight (the per-request TTFTs of both
    clients show groups of 3-4 requests delayed by the same few hundred ms). 0-3 such stalls fall in
    a 40-request run, so its mean TTFT moves by up to 2x from run to run for either client (ratios
    ours/vLLM within a round measured 0.20-2.37, median over 7 rounds 0.68), while the median TTFT,
    and TPOT (a stall is spread over a request's 32-96 tokens), stay within a few per cent.
    """
    from transformers import AutoTokenizer

    url, model_path = bench_vllm_server
    tok = AutoTokenizer.from_pretrained(model_path)
    data = tmp_path / "prompts.jsonl"
    prompts = [r.prompt for r in random_requests(NUM_PROMPTS, INPUT_LEN, 1, tok, seed=0)]
    rng = np.random.default_rng(0)
    output_lens = rng.integers(OUTPUT_LEN // 2, OUTPUT_LEN * 3 // 2 + 1, size=NUM_PROMPTS).tolist()
    rows = [{"prompt": p, "output_tokens": n} for p, n in zip(prompts, output_lens, strict=True)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ours_cfg = BenchConfig(
        base_url=url, num_prompts=NUM_PROMPTS, max_concurrency=CONCURRENCY, dataset="jsonl",
        dataset_path=str(data), shuffle=False, ignore_eos=True, tokenizer=str(model_path), num_warmups=4,
    )  # fmt: skip
    script = REPO / "toolbox" / "serving" / "bench" / "vllm_serve.py"
    vllm_args = [
        "--base-url", url.removesuffix("/v1"), "--model", "tiny", "--tokenizer", str(model_path),
        "--dataset-name", "custom", "--dataset-path", str(data), "--skip-chat-template", "--disable-shuffle",
        "--custom-output-len", "-1", "--num-prompts", str(NUM_PROMPTS),
        "--max-concurrency", str(CONCURRENCY), "--ignore-eos", "--num-warmups", "4", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
    ]  # fmt: skip

    def vllm_bench() -> dict:
        r = run_in_vllm_env(script, *vllm_args, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    asyncio.run(run_benchmark(ours_cfg))  # an unmeasured first run of each: the server's first
    vllm_bench()  # /tokenize, /metrics and completions of these prompts come before the rounds
    rounds = []
    for i in range(ROUNDS):
        if i % 2 == 0:
            ours = asyncio.run(run_benchmark(ours_cfg))
            theirs = vllm_bench()
        else:
            theirs = vllm_bench()
            ours = asyncio.run(run_benchmark(ours_cfg))
        rounds.append((ours, theirs))
    for ours, theirs in rounds:  # the same load, completed
        assert ours["completed"] == theirs["completed"] == NUM_PROMPTS, (ours["errors"], theirs)
        assert ours["total_output_tokens"] == theirs["total_output_tokens"] == sum(output_lens)
        assert ours["total_input_tokens"] == theirs["total_input_tokens"] == NUM_PROMPTS * INPUT_LEN
    failures = []
    for key in AGREEMENT + REPORTED:
        ratios = [o[key] / t[key] for o, t in rounds]
        ratio = float(np.median(ratios))
        print(
            f"{key}: ours {[round(o[key], 2) for o, _ in rounds]} vllm {[round(t[key], 2) for _, t in rounds]}"
            f" ratios {[round(x, 3) for x in ratios]} median ratio {ratio:.3f}"
        )
        if key in AGREEMENT and abs(ratio - 1.0) >= 0.15:
            failures.append((key, ratio))
    assert not failures, failures
