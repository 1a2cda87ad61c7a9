"""``toolbox bench serve``: its parser, built from ``BenchConfig`` (one ``--flag`` per field, the
field's default and help), the command, and the report (a table; a latency histogram).

List and dict fields are written as vLLM's flags are: ``--percentiles 50,90,99`` and
``--goodput ttft:MS tpot:MS``, ``--disable-shuffle``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

from toolbox.serving.bench.serve import METRICS, BenchConfig, parse_goodput, run_benchmark


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
def _scalar(annotation: str) -> Any:
    for name, kind in (("int", int), ("float", float)):
        if annotation.startswith(name):
            return kind
    return str


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """One ``--flag`` per ``BenchConfig`` field, with its default and help."""
    hints = typing.get_type_hints(BenchConfig)
    for f in dataclasses.fields(BenchConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_ = f.metadata.get("help", "")
        kind = hints[f.name]
        if f.name == "shuffle":  # vLLM's flag for it
            p.add_argument("--disable-shuffle", dest="shuffle", action="store_false", help=help_)
        elif kind is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_)
        elif f.name == "percentiles":
            p.add_argument(
                flag, default=",".join(f"{x:g}" for x in default), help=help_ + " (comma-separated)"
            )
        elif f.name == "goodput":
            p.add_argument(flag, nargs="+", default=None, metavar="KEY:MS", help=help_)
        else:
            p.add_argument(
                flag,
                type=_scalar(str(kind).replace("typing.", "").replace("<class '", "")),
                default=default,
                choices=f.metadata.get("choices"),
                help=help_ if "default" in help_ else f"{help_} (default: {default})",
            )


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from toolbox.core.errors import ConfigError

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchConfig)}
    try:
        values["goodput"] = parse_goodput(args.goodput)
        values["percentiles"] = [float(p) for p in str(args.percentiles).split(",") if p.strip()]
    except ValueError as e:
        raise ConfigError(f"--percentiles / --goodput: {e}") from e
    if values["dataset"] == "jsonl" and not values["dataset_path"]:
        raise ConfigError("--dataset jsonl needs --dataset-path FILE")
    return BenchConfig(**values)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    cfg = config_from_args(args)
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
    add_config_arguments(p)
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--plot", default=None, help="write a latency histogram PNG here")
    p.set_defaults(fn=cmd_bench_serve)
