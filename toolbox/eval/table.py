"""``toolbox table``: the mean ± std of one eval metric over the runs (seeds) of each row, beside a
reference number (a paper's), as Markdown and JSON.

::

    toolbox table --metric eval/test_accuracy --scale 100 \\
        --row GCN "81.5 (Kipf & Welling, 2017)" work/gcn_cora_s*/eval.json \\
        --out results/tables/cora.md --json results/tables/cora.json

The workflow's table stage (``tables:`` in ``config/config.yaml``) runs it over the runs' eval.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from toolbox.core.atomic import atomic_write_text
from toolbox.core.errors import ConfigError


def table_rows(
    metric: str, rows: list[tuple[str, str, list[str]]], scale: float = 1.0
) -> list[dict[str, Any]]:
    """One dict per row: its label, reference, the metric of each eval file (times ``scale``), mean
    and sample standard deviation (0 for one run)."""
    out = []
    for label, reference, files in rows:
        values = []
        for path in files:
            try:
                metrics = json.loads(Path(path).read_text())
            except FileNotFoundError:
                raise ConfigError(
                    f"table row {label}: {path} does not exist; evaluate the run first."
                ) from None
            if metric not in metrics:
                raise ConfigError(
                    f"table row {label}: {path} has no '{metric}'; it has: {', '.join(sorted(metrics))}."
                )
            values.append(float(metrics[metric]) * scale)
        out.append(
            {
                "label": label,
                "reference": reference,
                "runs": [str(f) for f in files],
                "values": values,
                "mean": statistics.fmean(values),
                "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            }
        )
    return out


def markdown(title: str, metric: str, scale: float, rows: list[dict[str, Any]]) -> str:
    unit = " (%)" if scale == 100 else ""
    lines = [
        f"## {title}",
        "",
        f"| | runs | {metric}{unit}: mean ± std | min | max | reference |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {len(r['values'])} | {r['mean']:.2f} ± {r['std']:.2f} | {min(r['values']):.2f} "
            f"| {max(r['values']):.2f} | {r['reference'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def cmd_table(args: argparse.Namespace) -> int:
    rows = []
    for row in args.row:
        if len(row) < 3:
            raise ConfigError(f"--row {' '.join(row)}: expected LABEL REFERENCE EVAL_JSON [EVAL_JSON ...].")
        rows.append((row[0], "" if row[1] == "-" else row[1], row[2:]))
    computed = table_rows(args.metric, rows, args.scale)
    text = markdown(args.title, args.metric, args.scale, computed)
    atomic_write_text(Path(args.out), text)
    if args.json:
        content = {"title": args.title, "metric": args.metric, "scale": args.scale, "rows": computed}
        atomic_write_text(Path(args.json), json.dumps(content, indent=2) + "\n")
    print(text, end="")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("table", help="mean ± std of an eval metric over runs (seeds), beside a reference")
    p.add_argument("--metric", required=True, help="the eval.json key, e.g. eval/test_accuracy")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the metric (100: percent)")
    p.add_argument(
        "--row",
        nargs="+",
        action="append",
        required=True,
        metavar="ARG",
        help="LABEL REFERENCE EVAL_JSON...: one row (REFERENCE '-' for none)",
    )
    p.add_argument("--title", default="Results", help="the table's heading")
    p.add_argument("--out", required=True, help="the Markdown file to write")
    p.add_argument("--json", help="also write the rows (values, mean, std) as JSON here")
    p.set_defaults(fn=cmd_table)
