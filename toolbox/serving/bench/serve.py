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

import asyncio
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolbox.serving.bench.data import BenchRequest, jsonl_requests, load_tokenizer, random_requests

METRICS = ("ttft", "tpot", "itl", "e2el")
__all__ = [
    "BenchConfig",
    "BenchRequest",
    "RequestResult",
    "jsonl_requests",
    "random_requests",
    "run_benchmark",
]


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
def _opt(default: Any, help: str, **kw: Any) -> Any:
    """A ``BenchConfig`` field: its default and its ``--flag`` help, in one place (``cli``)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class BenchConfig:
    """The benchmark's settings; ``toolbox bench serve`` has one ``--flag`` per field, with these
    defaults (``cli.py`` builds the parser from this class)."""

    base_url: str = _opt("http://127.0.0.1:8000/v1", "the server's /v1 URL")
    model: str | None = _opt(None, "model name (default: the first of /v1/models)")
    endpoint: str = _opt("completions", "the route to load", choices=["completions", "chat"])
    num_prompts: int = _opt(200, "requests measured")
    max_concurrency: int | None = _opt(None, "most requests in flight (default: no limit)")
    request_rate: float = _opt(float("inf"), "requests/s (inf: all at once)")
    burstiness: float = _opt(1.0, "gamma shape of the arrivals; 1.0 = Poisson")
    num_warmups: int = _opt(0, "warm-up requests before the measured ones")
    dataset: str = _opt("random", "random, or jsonl (with --dataset-path)", choices=["random", "jsonl"])
    dataset_path: str | None = _opt(None, "the jsonl file of --dataset jsonl")
    shuffle: bool = _opt(True, "jsonl: sample the prompts (--disable-shuffle: the first ones in file order)")
    random_input_len: int = _opt(32, "random: prompt tokens")
    random_output_len: int = _opt(32, "random: tokens asked for")
    random_range_ratio: float = _opt(0.0, "random: lengths vary by this fraction either side")
    tokenizer: str | None = _opt(None, "tokenizer folder (default: the model, if a folder)")
    percentiles: list[float] = _opt([50.0, 90.0, 99.0], "latency percentiles reported (99 always)")
    goodput: dict[str, float] = _opt({}, "SLOs in ms: ttft:MS tpot:MS e2el:MS")
    ignore_eos: bool = _opt(False, "generate every token asked for")
    temperature: float | None = _opt(None, "sampling temperature sent (default: the server's)")
    api_key: str | None = _opt(None, "bearer key (default: $OPENAI_API_KEY)")
    seed: int = _opt(0, "seeds the prompts and the arrivals")
    timeout: float = _opt(600.0, "seconds the whole benchmark may take")


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


# settings -----------------------------------------------------------------------------------------------
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
