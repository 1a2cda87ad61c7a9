"""The performance page and the charts of the generated pages, drawn at build time from the JSON
files the benchmarks and the example pipelines wrote (``docs/gen_pages.py`` adds them to the site):
nothing here holds a number.

A benchmark file gets one SVG of horizontal bar panels: the ratios it records (every numeric key
whose path names a ratio, a line at 1; the direction is the one the key names), then its
comparisons, found from the file's shape alone:

- sibling objects, one of them ours, that share numeric keys (``{"toolbox": {"steps_per_s": ..},
  "trl": {..}}``): one panel per shared key whose values differ, one bar per object;
- an object of numbers keyed by system, one of them ours (``{"ours": 10.6, "anyjev": 8.3}``).

An example's matrix of runs (``examples/<name>/results/**/eval.json``) gets one panel per eval
metric, one bar per run. SVGs are written by hand, deterministic, so a rebuild of
unchanged data writes the same bytes; ours are the blue bars.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.sax.saxutils import escape

MAX_PANELS = 16
MAX_WIDTH, BAR_W, BAR_H, TITLE_H = 1100, 170, 16, 20  # px
OURS = ("ours", "toolbox")
RATIO = ("ratio", "_over_")  # a key naming a ratio: ratio_vs_trl, store_over_bare_p50


def _is_ratio(key: str) -> bool:
    return any(r in key for r in RATIO)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _flat(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flat(v, key + ".")
        elif _number(v):
            yield key, v


def ratios(data: dict) -> dict[str, float]:
    """``{key path: value}`` of every numeric key that names a ratio (``RATIO``)."""
    return {k: float(v) for k, v in _flat(data) if _is_ratio(k)}


def _has_ours(systems) -> bool:
    return any(k.lower().startswith(OURS) for k in systems)


def comparisons(data: dict, path: str = "") -> list[tuple[str, dict[str, float]]]:
    """``[(panel title, {system: value})]`` of the comparisons the file's shape shows."""
    out: list[tuple[str, dict[str, float]]] = []
    children = {k: v for k, v in data.items() if isinstance(v, dict) and not _is_ratio(k)}
    numeric = {
        k: {m: x for m, x in v.items() if _number(x) and not _is_ratio(m)} for k, v in children.items()
    }
    keys = [m for v in numeric.values() for m in v]
    for metric in dict.fromkeys(keys):  # file order
        systems = {k: float(v[metric]) for k, v in numeric.items() if metric in v}
        if len(systems) >= 2 and len(set(systems.values())) > 1 and _has_ours(systems):
            out.append((f"{path}{metric}", systems))
    scalars = {k: float(v) for k, v in data.items() if _number(v) and not _is_ratio(k)}
    if len(scalars) >= 2 and _has_ours(scalars):
        out.append((path.rstrip(".") or "values", scalars))
    for k, v in children.items():
        out += comparisons(v, f"{path}{k}.")
    return out


def _bars(
    name: str, bars: dict[str, float], line: float | None, width: tuple[int, int]
) -> tuple[list[str], int]:
    """One panel's SVG elements (at the origin) and its height: a title, a bar and a value per label."""
    label_w, bar_w = width
    lo = min(0.0, *bars.values())
    hi = max(*bars.values(), line if line is not None else 0.0, 1e-12)
    x = lambda v: label_w + (v - lo) / (hi - lo) * bar_w  # noqa: E731
    out = [f'<text x="0" y="12" font-weight="bold">{escape(name)}</text>']
    for i, (label, v) in enumerate(bars.items()):
        y = TITLE_H + i * BAR_H
        color = "#3f51b5" if label.lower().startswith(OURS) else "#9e9e9e"
        left, right = sorted((x(0.0), x(v)))
        out += [
            f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{escape(label)}</text>',
            f'<rect x="{left:.1f}" y="{y + 2}" width="{max(right - left, 0.5):.1f}" height="{BAR_H - 4}" fill="{color}"/>',
            f'<text x="{right + 4:.1f}" y="{y + 11}">{v:.3g}</text>',
        ]
    height = TITLE_H + len(bars) * BAR_H + 6
    if line is not None:
        out.append(
            f'<line x1="{x(line):.1f}" x2="{x(line):.1f}" y1="{TITLE_H - 2}" y2="{height - 4}" '
            'stroke="#c62828" stroke-dasharray="4 3"/>'
        )
    return out, height


def _svg(panels: list[tuple[str, dict[str, float], float | None]], title: str) -> str:
    """One SVG of horizontal bar panels in a grid; ``panels`` is ``[(title, {label: value}, reference
    line)]``. Written by hand (matplotlib took about a second a chart on this machine's load)."""
    longest = max(len(label) for _, bars, _ in panels for label in bars)
    label_w = min(6 * longest + 10, 260)
    panel_w = label_w + BAR_W + 60
    cols = max(1, min(len(panels), MAX_WIDTH // panel_w))
    body, y = [f'<text x="0" y="14" font-size="13" font-weight="bold">{escape(title)}</text>'], 26
    for row in range(0, len(panels), cols):
        heights = []
        for col, (name, bars, line) in enumerate(panels[row : row + cols]):
            elements, height = _bars(name, bars, line, (label_w, BAR_W))
            body += [f'<g transform="translate({col * panel_w},{y})">', *elements, "</g>"]
            heights.append(height)
        y += max(heights) + 10
    w = cols * panel_w
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{y}" viewBox="0 0 {w} {y}" '
        f'font-family="sans-serif" font-size="10" fill="#212121">\n' + "\n".join(body) + "\n</svg>\n"
    )


def benchmark_svg(data: dict, title: str) -> str | None:
    """The chart of one benchmark file (None when it records nothing to compare)."""
    panels: list[tuple[str, dict[str, float], float | None]] = []
    found = ratios(data)
    if found:
        panels.append(("ratios (1 = parity)", found, 1.0))
    panels += [(name, bars, None) for name, bars in comparisons(data)]
    return _svg(panels[:MAX_PANELS], title) if panels else None


def _expected(rule) -> tuple[float | None, str]:
    """The threshold line and title note of an ``expect:`` rule (``{min: 0.95}``)."""
    for key, sign in (("min", ">="), ("max", "<=")):
        if isinstance(rule, dict) and _number(rule.get(key)):
            return float(rule[key]), f" (expected {sign} {rule[key]:g})"
    return None, ""


def matrix_svg(results: Path, title: str) -> str | None:
    """The eval metrics of every run under ``results`` (``<point>/eval.json``), one panel per
    metric, with the run's declared expectation (``run.json``'s ``expect``) as the line; None with
    fewer than two runs."""
    runs = {
        p.parent.relative_to(results).as_posix(): json.loads(p.read_text())
        for p in sorted(results.rglob("eval.json"))
    }
    if len(runs) < 2:
        return None
    expect: dict = {}
    for run in sorted(results.rglob("run.json")):
        expect.update(json.loads(run.read_text()).get("expect") or {})
    metrics = dict.fromkeys(m for r in runs.values() for m, v in r.items() if _number(v))
    panels = []
    for m in metrics:
        line, note = _expected(expect.get(m))
        panels.append((m + note, {run: float(r[m]) for run, r in runs.items() if _number(r.get(m))}, line))
    return _svg(panels[:MAX_PANELS], title)


# ---------- the pages' parts ----------


def _table_rows(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _table_rows(v, key + ".")
        elif isinstance(v, (int, float, str, bool)) or v is None:
            yield key, v


PLOTS = "plots"  # the site folder of the generated charts


def benchmark_plots(root: Path) -> dict[str, str]:
    """``{site path: SVG}``: the chart of every benchmark file that records a comparison."""
    out = {}
    for f in sorted((root / "benchmarks" / "results").rglob("*.json")):
        data = json.loads(f.read_text())
        svg = benchmark_svg(data, f.relative_to(root).as_posix()) if isinstance(data, dict) else None
        if svg:
            out[f"{PLOTS}/{f.relative_to(root / 'benchmarks').with_suffix('.svg').as_posix()}"] = svg
    return out


def render_performance(root: Path, plots: dict[str, str]) -> str:
    lines = [
        "# Performance",
        "",
        "Generated from the JSON files the benchmarks write (`benchmarks/results/`); each section is one "
        "file, as measured (the command and machine load are in the file). Ratios compare us with the "
        "peer library in the same run, in the direction their key names. The charts are drawn from the "
        "same files at build time (ours in blue; a dashed line at ratio 1). How to rerun: "
        "`benchmarks/README.md`.",
        "",
    ]
    files = sorted((root / "benchmarks" / "results").rglob("*.json"))
    if not files:
        lines.append("No benchmark results are present in this checkout.")
    for f in files:
        data = json.loads(f.read_text())
        lines += [f"## `{f.relative_to(root)}`", ""]
        if not isinstance(data, dict):
            lines += [f"A list of {len(data)} records.", ""]
            continue
        chart = f"{PLOTS}/{f.relative_to(root / 'benchmarks').with_suffix('.svg').as_posix()}"
        if chart in plots:
            lines += [f"![the comparisons of {f.name}]({chart})", ""]
        rows = list(_table_rows(data))
        lines += ["| key | value |", "|---|---|"]
        for k, v in rows:
            text = f"{v:.4g}" if isinstance(v, float) else str(v)
            lines.append(f"| `{k}` | {text.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def example_plots(readme: Path, plots: dict[str, str]) -> str:
    """The charts an example's page ends with: its matrix of runs (``results/``, drawn here) and the
    chart of every benchmark file its README names. Only files the pipeline wrote; none is made up."""
    name, lines = readme.parent.name, []
    matrix = matrix_svg(readme.parent / "results", f"examples/{name}/results: every run's eval")
    if matrix:
        plots[f"{PLOTS}/examples/{name}.svg"] = matrix
        lines += ["### The runs", "", f"![every run's eval metrics](../{PLOTS}/examples/{name}.svg)", ""]
    for bench in dict.fromkeys(re.findall(r"benchmarks/results/[\w/.-]+?\.json", readme.read_text())):
        chart = f"{PLOTS}/{Path(bench).relative_to('benchmarks').with_suffix('.svg').as_posix()}"
        if chart in plots:
            lines += [
                f"### `{bench}`",
                "",
                f"![{bench}](../{chart})",
                "",
                "The table: [Performance](../performance.md).",
                "",
            ]
    return "\n## Charts\n\nDrawn at build time from the files named.\n\n" + "\n".join(lines) if lines else ""
