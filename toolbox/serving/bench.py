"""``toolbox bench serve``: benchmark any OpenAI-compatible server the way vLLM's ``vllm bench serve`` does.

Load model (as vLLM's ``benchmarks/serve.py``): one test request first (the server must answer it),
then ``--num-warmups`` warm-up requests, then ``--num-prompts`` requests whose arrival times are a
gamma process of rate ``--request-rate`` and shape ``--burstiness`` (1.0: Poisson; ``inf`` rate:
all at once), rescaled so that the last arrives at ``num_prompts / rate``, and at most
``--max-concurrency`` in flight (a semaphore). Every request streams ``/completions`` (or
``/chat/completions``) with ``stream_options.include_usage``.

Metrics, with vLLM's definitions:

- TTFT: from sending the request to the first chunk that carries a choice;
- ITL: the gap between successive chunks that carry a choice (one per chunk);
- E2EL: from sending to the last chunk that carries a choice;
- TPOT: per request ``(e2el - ttft) / (output_tokens - 1)`` for requests with more than one token;
- output tokens: the usage's ``completion_tokens`` (else counted with the tokenizer, else 1);
- throughputs: completed requests, output tokens and input+output tokens per second of benchmark
  duration (from the first arrival to the last response; warm-ups excluded);
- goodput: requests per second meeting every SLO of ``--goodput ttft:MS tpot:MS e2el:MS``
  (a request of one token counts TPOT 0).

Mean, median, std and the ``--percentiles`` (99 always) of TTFT, TPOT, ITL and E2EL, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass
class BenchRequest:
    prompt: str | list[int]
    prompt_len: int
    output_len: int


@dataclass
class RequestResult:
    success: bool = False
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    start_time: float = 0.0
    generated_text: str = ""
    error: str = ""


# data sets ----------------------------------------------------------------------------------------
def load_tokenizer(path: str | None) -> Any:
    if not path:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except Exception:
        return None


def random_requests(
    n: int, input_len: int, output_len: int, tokenizer: Any, seed: int = 0, range_ratio: float = 0.0
) -> list[BenchRequest]:
    """``n`` prompts of random tokens asking for ``output_len`` tokens, with the lengths of vLLM's
    random data set: ``input_len`` counts the tokenizer's special tokens (a BOS), so the server sees
    ``input_len`` prompt tokens; with ``range_ratio`` r the lengths are uniform integers in
    ``[floor(L (1 - r)), ceil(L (1 + r))]`` (output at least 1). The text is decoded from random
    non-special ids (random lowercase words without a tokenizer)."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    rng = random.Random(seed)
    num_special = int(tokenizer.num_special_tokens_to_add()) if tokenizer is not None else 0
    real_in = max(0, input_len - num_special)
    lo_in, hi_in = math.floor(real_in * (1 - range_ratio)), math.ceil(real_in * (1 + range_ratio))
    lo_out = max(1, math.floor(output_len * (1 - range_ratio)))
    hi_out = max(1, math.ceil(output_len * (1 + range_ratio)))
    if hi_in < 1:
        raise ValueError(f"--random-input-len {input_len} leaves no room beside {num_special} special tokens")
    vocab: list[int] = []
    if tokenizer is not None:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        special |= set(
            (tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}).values()
        )
        vocab = [i for i in range(len(tokenizer)) if i not in special]
    out = []
    for _ in range(n):
        n_in, n_out = max(1, rng.randint(lo_in, hi_in)), rng.randint(lo_out, hi_out)
        if tokenizer is not None:
            text = tokenizer.decode([rng.choice(vocab) for _ in range(n_in)])
            prompt_len = len(tokenizer(text)["input_ids"])  # what the server sees, specials included
        else:
            text = " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=4)) for _ in range(n_in))
            prompt_len = n_in
        out.append(BenchRequest(text, prompt_len, n_out))
    return out


def jsonl_requests(
    path: str, n: int, output_len: int, tokenizer: Any, seed: int = 0, shuffle: bool = True
) -> list[BenchRequest]:
    """Prompts from a JSONL file: one object per line with ``prompt`` (or ``text``), optional
    ``output_tokens`` (vLLM's ``custom`` data set), ``output_len`` or ``max_tokens``; sampled (with
    replacement if there are fewer than ``n``), or with ``shuffle=False`` the first ``n`` in file
    order (repeated from the top if there are fewer), as ``vllm bench serve --dataset-name custom
    --disable-shuffle`` takes them."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise ValueError(f"{path} holds no prompts")
    rng = random.Random(seed)
    if not shuffle:
        picked = [rows[i % len(rows)] for i in range(n)]
    elif len(rows) >= n:
        picked = rng.sample(rows, n)
    else:
        picked = [rng.choice(rows) for _ in range(n)]
    out = []
    for row in picked:
        prompt = row.get("prompt", row.get("text"))
        if prompt is None:
            raise ValueError(f"{path}: every line needs a 'prompt' field")
        plen = len(tokenizer(prompt)["input_ids"]) if tokenizer is not None else len(str(prompt).split())
        n_out = row.get("output_tokens", row.get("output_len", row.get("max_tokens", output_len)))
        out.append(BenchRequest(prompt, plen, int(n_out)))
    return out


# load ----------------------------------------------------------------------------------------------
def arrival_delays(n: int, request_rate: float, burstiness: float, seed: int = 0) -> list[float]:
    """Cumulative send times (s) of ``n`` requests, as vLLM's ``get_request`` (no ramp-up)."""
    import numpy as np

    if burstiness <= 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    if request_rate == float("inf"):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    if burstiness == float("inf"):
        delays = [1.0 / request_rate] * n
    else:
        theta = 1.0 / (request_rate * burstiness)
        delays = list(rng.gamma(shape=burstiness, scale=theta, size=n))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    if delays and delays[-1] != 0:
        factor = (n / request_rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


async def request_completion(
    session: Any,
    url: str,
    model: str,
    req: BenchRequest,
    chat: bool,
    headers: dict[str, str],
    extra: dict[str, Any],
) -> RequestResult:
    """One streamed request, timed as vLLM's ``async_request_openai_completions``."""
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": req.output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        payload["messages"] = [{"role": "user", "content": req.prompt}]
        payload["max_completion_tokens"] = req.output_len
    else:
        payload["prompt"] = req.prompt
        payload["repetition_penalty"] = 1.0
    payload.update(extra)
    out = RequestResult(prompt_len=req.prompt_len)
    text = []
    st = time.perf_counter()
    out.start_time = st
    recent = st
    try:
        async with session.post(url=url, json=payload, headers=headers) as response:
            if response.status != 200:
                out.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                return out
            first = False
            buffer = b""
            async for piece in response.content.iter_any():
                buffer += piece
                while b"\n\n" in buffer:
                    message, buffer = buffer.split(b"\n\n", 1)
                    message = message.strip()
                    if not message or message.startswith(b":"):
                        continue
                    data = message.decode().removeprefix("data:").strip()
                    if data == "[DONE]":
                        continue
                    obj = json.loads(data)
                    if "error" in obj:
                        raise RuntimeError(f"error event: {obj['error']}")
                    if choices := obj.get("choices"):
                        now = time.perf_counter()
                        if not first:
                            first = True
                            out.ttft = now - st
                        else:
                            out.itl.append(now - recent)
                        recent = now
                        c = choices[0]
                        text.append(
                            (c.get("delta") or {}).get("content") or "" if chat else c.get("text") or ""
                        )
                    elif usage := obj.get("usage"):
                        out.output_tokens = usage.get("completion_tokens") or 0
                        if usage.get("prompt_tokens") is not None:
                            out.prompt_len = usage["prompt_tokens"]
            out.success = first
            if not first:
                out.error = "never received a chunk with a choice"
            out.generated_text = "".join(text)
            out.latency = recent - st
    except Exception as e:
        out.success = False
        out.error = f"{type(e).__name__}: {e}"
    return out


# metrics -------------------------------------------------------------------------------------------
def _pword(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def calculate_metrics(
    results: list[RequestResult],
    duration: float,
    percentiles: list[float],
    goodput: dict[str, float] | None = None,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """vLLM's ``calculate_metrics``: the summary of a run (times in ms, throughputs per second)."""
    import numpy as np

    goodput = goodput or {}
    output_lens, ttfts, tpots, all_tpots, itls, e2els = [], [], [], [], [], []
    total_input = completed = good = 0
    for r in results:
        if not r.success:
            output_lens.append(0)
            continue
        n = r.output_tokens
        if not n:
            if tokenizer is not None:
                n = len(tokenizer(r.generated_text, add_special_tokens=False)["input_ids"])
            else:
                n = 1
        output_lens.append(n)
        total_input += r.prompt_len
        tpot = 0.0
        if n > 1:
            tpot = (r.latency - r.ttft) / (n - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls += r.itl
        ttfts.append(r.ttft)
        e2els.append(r.latency)
        completed += 1
        slos = {"ttft": r.ttft, "tpot": tpot, "e2el": r.latency}
        if goodput and all(slos[k] <= v / 1000.0 for k, v in goodput.items()):
            good += 1
    total_output = sum(output_lens)
    m: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": len(results) - completed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration if duration else 0.0,
        "request_goodput": (good / duration if duration else 0.0) if goodput else None,
        "output_throughput": total_output / duration if duration else 0.0,
        "total_token_throughput": (total_input + total_output) / duration if duration else 0.0,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        arr = np.asarray(values or [0.0]) * 1000.0
        m[f"mean_{name}_ms"] = float(np.mean(arr))
        m[f"median_{name}_ms"] = float(np.median(arr))
        m[f"std_{name}_ms"] = float(np.std(arr))
        for p in percentiles:
            m[f"p{_pword(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return m


# running -------------------------------------------------------------------------------------------
@dataclass
class BenchConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str | None = None
    endpoint: str = "completions"
    num_prompts: int = 200
    max_concurrency: int | None = None
    request_rate: float = float("inf")
    burstiness: float = 1.0
    num_warmups: int = 0
    dataset: str = "random"
    dataset_path: str | None = None
    shuffle: bool = True  # jsonl: sample the prompts; False: the first num_prompts in file order
    random_input_len: int = 32
    random_output_len: int = 32
    random_range_ratio: float = 0.0
    tokenizer: str | None = None
    percentiles: list[float] = field(default_factory=lambda: [99.0])
    goodput: dict[str, float] = field(default_factory=dict)
    ignore_eos: bool = False
    temperature: float | None = None
    api_key: str | None = None
    seed: int = 0
    timeout: float = 600.0


async def _discover_model(session: Any, base_url: str, headers: dict[str, str]) -> str:
    async with session.get(f"{base_url}/models", headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"GET {base_url}/models answered {r.status}: {(await r.text())[:200]}")
        return (await r.json())["data"][0]["id"]


async def run_benchmark(cfg: BenchConfig, requests: list[BenchRequest] | None = None) -> dict[str, Any]:
    """Run the load of ``cfg`` against ``cfg.base_url``; the metrics, the config and per-request data."""
    import aiohttp

    base = cfg.base_url.rstrip("/")
    key = cfg.api_key or os.environ.get("OPENAI_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    connector = aiohttp.TCPConnector(limit=cfg.max_concurrency or 0, keepalive_timeout=60)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=cfg.timeout)
    ) as session:
        model = cfg.model or await _discover_model(session, base, headers)
        tokenizer = load_tokenizer(cfg.tokenizer or (model if Path(model).is_dir() else None))
        if requests is None:
            if cfg.dataset == "jsonl":
                if not cfg.dataset_path:
                    raise ValueError("--dataset jsonl needs a path")
                requests = jsonl_requests(
                    cfg.dataset_path, cfg.num_prompts, cfg.random_output_len, tokenizer, cfg.seed, cfg.shuffle
                )
            else:
                requests = random_requests(
                    cfg.num_prompts,
                    cfg.random_input_len,
                    cfg.random_output_len,
                    tokenizer,
                    cfg.seed,
                    cfg.random_range_ratio,
                )
        chat = cfg.endpoint == "chat"
        url = f"{base}/chat/completions" if chat else f"{base}/completions"
        extra: dict[str, Any] = {}
        if cfg.ignore_eos:
            extra["ignore_eos"] = True
        if cfg.temperature is not None:
            extra["temperature"] = cfg.temperature

        async def call(req: BenchRequest) -> RequestResult:
            return await request_completion(session, url, model, req, chat, headers, extra)

        test = await call(requests[0])
        if not test.success:
            raise RuntimeError(f"the test request failed: {test.error}")
        sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None

        async def limited(req: BenchRequest) -> RequestResult:
            if sem is None:
                return await call(req)
            async with sem:
                return await call(req)

        if cfg.num_warmups:
            await asyncio.gather(*[limited(requests[0]) for _ in range(cfg.num_warmups)])
        delays = arrival_delays(len(requests), cfg.request_rate, cfg.burstiness, cfg.seed)
        start = time.perf_counter()
        tasks = []
        for req, at in zip(requests, delays, strict=True):
            wait = start + at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(limited(req)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    percentiles = sorted(set(cfg.percentiles) | {99.0})
    metrics = calculate_metrics(results, duration, percentiles, cfg.goodput, tokenizer)
    config = asdict(cfg)
    config["request_rate"] = "inf" if math.isinf(cfg.request_rate) else cfg.request_rate
    config["burstiness"] = "inf" if math.isinf(cfg.burstiness) else cfg.burstiness
    config.pop("api_key", None)
    config["model"] = model
    return {
        **metrics,
        "config": config,
        "errors": [r.error for r in results if not r.success][:20],
        "requests": [
            {
                "prompt_len": r.prompt_len,
                "output_tokens": r.output_tokens,
                "ttft": r.ttft,
                "latency": r.latency,
                "start_time": r.start_time - start,
                "itl": r.itl,
                "success": r.success,
            }
            for r in results
        ],
    }


# reporting -----------------------------------------------------------------------------------------
def summary_table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    cfg = result["config"]
    t = Table(title=f"Serving benchmark: {cfg['base_url']} ({cfg['model']})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key, label in (
        ("completed", "Successful requests"),
        ("failed", "Failed requests"),
        ("duration", "Benchmark duration (s)"),
        ("total_input_tokens", "Total input tokens"),
        ("total_output_tokens", "Total generated tokens"),
        ("request_throughput", "Request throughput (req/s)"),
        ("request_goodput", "Request goodput (req/s)"),
        ("output_throughput", "Output token throughput (tok/s)"),
        ("total_token_throughput", "Total token throughput (tok/s)"),
    ):
        v = result.get(key)
        if v is not None:
            t.add_row(label, f"{v:.2f}" if isinstance(v, float) else str(v))
    stats = ["mean", "median", "std"] + [
        k.split("_")[0] for k in result if k.startswith("p") and k.endswith("_ttft_ms")
    ]
    for name in METRICS:
        t.add_section()
        for s in stats:
            key = f"{s}_{name}_ms"
            if key in result:
                t.add_row(
                    f"{s.capitalize() if not s.startswith('p') else s.upper()} {name.upper()} (ms)",
                    f"{result[key]:.2f}",
                )
    return t


def plot_latency(result: dict[str, Any], path: str | Path) -> Path:
    """Histograms of TTFT, TPOT, ITL and E2EL (ms) as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reqs = [r for r in result["requests"] if r["success"]]
    data = {
        "TTFT": [r["ttft"] * 1000 for r in reqs],
        "TPOT": [
            (r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) * 1000
            for r in reqs
            if r["output_tokens"] > 1
        ],
        "ITL": [x * 1000 for r in reqs for x in r["itl"]],
        "E2EL": [r["latency"] * 1000 for r in reqs],
    }
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (name, values) in zip(axes.flat, data.items(), strict=True):
        if values:
            ax.hist(values, bins=40)
            ax.axvline(sum(values) / len(values), color="k", linestyle="--", label="mean")
            ax.legend()
        ax.set_title(f"{name} (ms)")
        ax.set_ylabel("count")
    cfg = result["config"]
    fig.suptitle(
        f"{cfg['model']}: {result['completed']} requests, rate {cfg['request_rate']}, "
        f"concurrency {cfg['max_concurrency']}, {result['output_throughput']:.0f} output tok/s"
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# CLI -----------------------------------------------------------------------------------------------
def parse_goodput(items: list[str] | None) -> dict[str, float]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition(":")
        if not sep or key not in ("ttft", "tpot", "e2el"):
            raise ValueError(f"--goodput {item!r}: expected ttft:MS, tpot:MS or e2el:MS")
        out[key] = float(value)
        if out[key] < 0:
            raise ValueError(f"--goodput {item!r}: the SLO must be >= 0 ms")
    return out


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    from toolbox.core.errors import ConfigError

    try:
        goodput = parse_goodput(args.goodput)
        percentiles = [float(p) for p in args.percentiles.split(",") if p.strip()]
    except ValueError as e:
        raise ConfigError(str(e)) from e
    dataset, dataset_path = args.dataset[0], (args.dataset[1] if len(args.dataset) > 1 else None)
    if dataset not in ("random", "jsonl"):
        raise ConfigError(f"--dataset {dataset}: expected random or jsonl PATH")
    cfg = BenchConfig(
        base_url=args.base_url,
        model=args.model,
        endpoint=args.endpoint,
        num_prompts=args.num_prompts,
        max_concurrency=args.max_concurrency,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        num_warmups=args.num_warmups,
        dataset=dataset,
        dataset_path=dataset_path,
        shuffle=not args.disable_shuffle,
        random_input_len=args.random_input_len,
        random_output_len=args.random_output_len,
        random_range_ratio=args.random_range_ratio,
        tokenizer=args.tokenizer,
        percentiles=percentiles,
        goodput=goodput,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        api_key=args.api_key,
        seed=args.seed,
    )
    result = asyncio.run(run_benchmark(cfg))
    Console().print(summary_table(result))
    if args.out:
        from toolbox.core.atomic import atomic_write_text

        atomic_write_text(Path(args.out), json.dumps(result, indent=2) + "\n")
    if args.plot:
        plot_latency(result, args.plot)
    return 0 if result["completed"] else 1


def add_bench_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench", help="benchmarks: `toolbox bench serve` measures an OpenAI-compatible server"
    )
    bsub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH")
    p = bsub.add_parser("serve", help="vLLM-style serving benchmark of an OpenAI-compatible server")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--model", default=None, help="model name (default: the first of /v1/models)")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s (inf: all at once)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1.0 = Poisson")
    p.add_argument("--num-warmups", type=int, default=0)
    p.add_argument("--dataset", nargs="+", default=["random"], metavar="random|jsonl PATH")
    p.add_argument(
        "--disable-shuffle", action="store_true", help="jsonl: the first prompts in file order, unsampled"
    )
    p.add_argument("--random-input-len", type=int, default=32)
    p.add_argument("--random-output-len", type=int, default=32)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model, if a folder)")
    p.add_argument(
        "--goodput", nargs="+", default=None, metavar="KEY:MS", help="SLOs: ttft:MS tpot:MS e2el:MS"
    )
    p.add_argument("--percentiles", default="50,90,99")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--plot", default=None, help="write a latency histogram PNG here")
    p.set_defaults(fn=cmd_bench_serve)
