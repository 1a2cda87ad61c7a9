"""Prometheus metrics of ``toolbox serve``, written as the text exposition format (no dependency)."""

from __future__ import annotations

import threading
from collections import defaultdict

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{b}"}} {c}' for b, c in zip(self.buckets, self.counts, strict=True)]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {self.sum}")
        out.append(f"{name}_count {self.count}")
        return out


class ServerMetrics:
    """Counters and histograms a server updates per request; ``render()`` is the /metrics body."""

    prefix = "toolbox"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = defaultdict(int)  # (endpoint, status) -> count
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.in_flight = 0  # HTTP generation requests being served
        self.disconnects = 0

    def request_done(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, str(status))] += 1

    def tokens(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def latency(self, ttft: float | None, e2e: float, output_tokens: int) -> None:
        with self._lock:
            if ttft is not None:
                self.ttft.observe(ttft)
                if output_tokens > 1:
                    self.tpot.observe((e2e - ttft) / (output_tokens - 1))
            self.e2e.observe(e2e)

    def render(self, engine_stats: dict[str, int]) -> str:
        p = self.prefix
        with self._lock:
            lines = [
                f"# HELP {p}_requests_total HTTP generation requests by endpoint and status code.",
                f"# TYPE {p}_requests_total counter",
            ]
            for (endpoint, status), n in sorted(self.requests.items()):
                lines.append(f'{p}_requests_total{{endpoint="{endpoint}",status="{status}"}} {n}')
            lines += [
                f"# HELP {p}_prompt_tokens_total Prompt tokens processed.",
                f"# TYPE {p}_prompt_tokens_total counter",
                f"{p}_prompt_tokens_total {self.prompt_tokens}",
                f"# HELP {p}_generation_tokens_total Tokens generated.",
                f"# TYPE {p}_generation_tokens_total counter",
                f"{p}_generation_tokens_total {self.completion_tokens}",
                f"# HELP {p}_client_disconnects_total Requests cancelled because the client went away.",
                f"# TYPE {p}_client_disconnects_total counter",
                f"{p}_client_disconnects_total {self.disconnects}",
            ]
            for name, hist, help_ in (
                ("time_to_first_token_seconds", self.ttft, "Time to first token."),
                ("time_per_output_token_seconds", self.tpot, "Time per output token after the first."),
                ("e2e_request_latency_seconds", self.e2e, "End-to-end request latency."),
            ):
                lines += [f"# HELP {p}_{name} {help_}", f"# TYPE {p}_{name} histogram"]
                lines += hist.lines(f"{p}_{name}")
            waiting = engine_stats.get("waiting")
            running = engine_stats.get("running")
            lines += [
                f"# HELP {p}_num_requests_waiting Requests queued in the engine.",
                f"# TYPE {p}_num_requests_waiting gauge",
                f"{p}_num_requests_waiting {waiting if waiting is not None else 0}",
                f"# HELP {p}_num_requests_running Sequences in the running batch (or requests in flight).",
                f"# TYPE {p}_num_requests_running gauge",
                f"{p}_num_requests_running {running if running is not None else self.in_flight}",
                f"# HELP {p}_http_requests_in_flight Generation requests being served.",
                f"# TYPE {p}_http_requests_in_flight gauge",
                f"{p}_http_requests_in_flight {self.in_flight}",
            ]
        return "\n".join(lines) + "\n"
