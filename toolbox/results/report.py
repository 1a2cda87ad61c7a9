"""``toolbox report``: the result tables a reader sees, generated from the files the pipeline wrote.

Two kinds of table, both in Markdown and in one self-contained HTML page (no script, no network):

- **runs**: per run of config/config.yaml, its eval JSON (``results/<run>/eval.json``, else
  ``work/<run>/eval.json``), before and after for a run with ``init_from``, and each declared
  expectation (``expect:``) with the value got and whether it holds;
- **matrix**: a folder of perturbation runs (``<label>/eval.json`` and ``<label>/run.json`` with the
  settings that differ: seed, forward, threads, minutes), one row per run and the spread (min,
  median, max) of every metric over all of them, not the best one.

``--into FILE --block NAME`` replaces the text between ``<!-- report:NAME -->`` and
``<!-- /report:NAME -->`` in a Markdown file (an example's README) with the tables, so that the
numbers there are never typed by hand.
"""

from __future__ import annotations

import html
import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolbox.core.atomic import atomic_write_text
from toolbox.core.errors import ConfigError, DataError
from toolbox.results.expect import Row, check, flat

BEFORE, GAIN = "before/", "gain/"


@dataclass
class Table:
    """A titled table: header, rows of cells, and an optional note under it."""

    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [
            f"**{self.title}**",
            "",
            "| " + " | ".join(self.header) + " |",
            "|" + "---|" * len(self.header),
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return f"<h2>{html.escape(self.title)}</h2><table><tr>{head}</tr>{body}</table>{note}"


def _html_cell(cell: str) -> str:
    text = html.escape(cell.replace("**", ""))
    return f"<b>{text}</b>" if cell.startswith("**") else text


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    if isinstance(value, int | float):
        return f"{value:.4g}"
    return str(value)


# -- runs of config/config.yaml -------------------------------------------------------------------
def eval_json(root: Path, run: str) -> Path | None:
    for path in (root / "results" / run / "eval.json", root / "work" / run / "eval.json"):
        if path.is_file():
            return path
    return None


def runs_table(config: Path, root: Path) -> Table:
    import yaml

    if not config.is_file():
        raise ConfigError(f"--config: {config} does not exist; give the workflow's config/config.yaml.")
    runs = (yaml.safe_load(config.read_text()) or {}).get("runs") or {}
    table = Table(
        "Runs (config/config.yaml)",
        ["run", "metric", "before", "got", "expected", "holds", "source"],
        note="before: the model the run starts from (init_from), scored by the same evaluator on the same split.",
    )
    waiting = []
    for run, entry in runs.items():
        path = eval_json(root, run)
        if path is None:
            waiting.append(run)
            continue
        metrics = json.loads(path.read_text())
        source = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        agent = path.parent / "agent_eval.json"  # a run with agent: declares on its metrics too
        if entry.get("agent") and agent.is_file():
            metrics |= {k: v for k, v in flat(json.loads(agent.read_text())).items() if k not in metrics}
            source += " + agent_eval.json"
        table.rows += [[*r, source] for r in run_rows(run, metrics, entry.get("expect"))]
    if waiting:  # one line, not a row each: a fresh clone has run nothing yet
        table.note += f" Not run yet ({len(waiting)}): {', '.join(waiting)}."
    return table


def folders_table(folders: Sequence[Path], config: Path) -> Table:
    """The runs in ``folders`` (any run folder holding an eval.json: ``toolbox train``'s as well as
    the workflow's), checked against ``config``'s ``expect:`` where a run of that name declares one."""
    import yaml

    runs = (yaml.safe_load(config.read_text()) or {}).get("runs") or {} if config.is_file() else {}
    table = Table("Runs", ["run", "metric", "before", "got", "expected", "holds", "source"])
    for folder in folders:
        path = folder / "eval.json" if folder.is_dir() else folder
        if not path.is_file():
            raise DataError(f"{folder}: no eval.json there; evaluate it first (toolbox eval --run {folder}).")
        metrics = flat(json.loads(path.read_text()))
        if not any(k.startswith("eval/") for k in metrics):  # toolbox eval --run writes bare names
            metrics = {(k if "/" in k else f"eval/{k}"): v for k, v in metrics.items()}
        name = path.parent.name
        expect = (runs.get(name) or {}).get("expect")
        table.rows += [[*r, str(path)] for r in run_rows(name, metrics, expect)]
    return table


def run_rows(run: str, metrics: dict[str, Any], expect: Any) -> list[list[str]]:
    """[run, metric, before, got, expected, holds] for a run's headline metrics and every metric it
    declares an expectation on."""
    rows = check(metrics, expect, where=f"runs.{run}.expect")
    checked = {r.metric: r for r in rows}
    shown = [m for m in ("eval/exact_match", "eval/accuracy", "eval/loss") if m in metrics]
    shown += [r.metric for r in rows if r.metric not in shown]
    out = []
    for metric in shown:
        r: Row | None = checked.get(metric)
        base = metric.removeprefix(GAIN)
        out.append(
            [
                run,
                metric,
                fmt(metrics.get(BEFORE + base)) if not metric.startswith(GAIN) else "–",
                fmt(metrics.get(metric)),
                r.expected if r else "–",
                ("yes" if r.passed else "**NO**") if r else "–",
            ]
        )
    return out


def check_page(run: str, metrics: dict[str, Any], expect: Any) -> str:
    """The check stage's HTML page (for the Snakemake report): the run's table and every metric."""
    table = Table(f"{run}: expected vs got", ["run", "metric", "before", "got", "expected", "holds"])
    table.rows = run_rows(run, metrics, expect)
    every = Table(f"{run}: eval.json", ["metric", "value"], [[k, fmt(v)] for k, v in sorted(metrics.items())])
    return html_page(f"{run}: evaluation", [table, every])


# -- perturbation matrices ------------------------------------------------------------------------
def matrix_runs(folder: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(settings, metrics) of every ``<label>/`` holding eval.json and run.json, sorted by label."""
    if not folder.is_dir():
        raise DataError(f"--matrix: {folder} is not a folder of runs (<label>/eval.json + <label>/run.json).")
    out = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if (sub / "eval.json").is_file() and (sub / "run.json").is_file():
            out.append(
                (json.loads((sub / "run.json").read_text()), json.loads((sub / "eval.json").read_text()))
            )
    if not out:
        raise DataError(f"--matrix: {folder} holds no finished run (<label>/eval.json + <label>/run.json).")
    return out


def matrix_tables(folder: Path, expect: Any = None, only: Sequence[str] = ()) -> list[Table]:
    """The spread and the per-run table of a matrix; ``expect`` (else each point's own) is checked.
    ``only``: the metrics to show (each with its ``before/`` and ``gain/`` values); default all."""
    runs = matrix_runs(folder)
    settings = [
        k for k in dict.fromkeys(k for s, _ in runs for k in s) if k not in ("name", "expect", "command")
    ]
    metrics = sorted({k for _, m in runs for k, v in m.items() if isinstance(v, int | float)})
    metrics = [m for m in metrics if m.startswith(("eval/", BEFORE, GAIN))]
    if only:
        metrics = [m for m in metrics if m.removeprefix(BEFORE).removeprefix(GAIN) in only]
    name = runs[0][0].get("name", folder.name)
    expect = expect or runs[0][0].get("expect")
    per_run = Table(f"{name}: every run ({len(runs)})", [*settings, *metrics] + (["holds"] if expect else []))
    failures = 0
    for s, m in runs:
        cells = [fmt(s.get(k)) for k in settings] + [fmt(m.get(k)) for k in metrics]
        if expect:
            ok = all(r.passed for r in check(m, expect))
            failures += not ok
            cells.append("yes" if ok else "**NO**")
        per_run.rows.append(cells)
    spread = Table(
        f"{name}: spread over all {len(runs)} runs",
        ["metric", "min", "median", "max"] + (["expected"] if expect else []),
    )
    for metric in metrics:
        values = [float(m[metric]) for _, m in runs if isinstance(m.get(metric), int | float)]
        cells = [metric, fmt(min(values)), fmt(statistics.median(values)), fmt(max(values))]
        if expect:
            rows = check({metric: 0.0}, {k: v for k, v in expect.items() if k == metric})
            cells.append(rows[0].expected if rows else "–")
        spread.rows.append(cells)
    commands = sorted({s["command"] for s, _ in runs if s.get("command")})
    if expect:
        spread.note = f"{len(runs) - failures} of {len(runs)} runs meet the expectation."
    if commands:
        produced = " and ".join(f"`{c}`" for c in commands)
        spread.note = (spread.note + " " if spread.note else "") + f"Produced by {produced}."
    return [spread, per_run]


# -- output ---------------------------------------------------------------------------------------
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #999;padding:.25em .6em;text-align:left}th{background:#eee}"
)


def html_page(title: str, tables: Iterable[Table]) -> str:
    body = "".join(t.html() for t in tables)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def replace_block(text: str, block: str, content: str, where: str = "the file") -> str:
    start, end = f"<!-- report:{block} -->", f"<!-- /report:{block} -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ConfigError(
            f"--into: {where} has no block '{start}' ... '{end}'; add the two lines where the tables go."
        )
    return pattern.sub(lambda _: f"{start}\n{content}{end}", text, count=1)


def write_report(
    config: Path,
    root: Path,
    matrix: list[Path],
    md: Path | None = None,
    html: Path | None = None,
    into: Path | None = None,
    block: str = "results",
    title: str = "Results",
    expect_run: str | None = None,
    metrics: Sequence[str] = (),
    expect: dict | None = None,
    folders: Sequence[Path] = (),
) -> list[Path]:
    """Build the tables (the matrices given, else the run ``folders`` given, else the runs of
    ``config``) and write them; a matrix
    is checked against ``expect``, or with ``expect_run`` against that run's ``expect:`` in
    ``config``, else against the expectation each point recorded (its run.json)."""
    if expect is not None and expect_run:
        raise ConfigError("--expect and --expect-run: give one expectation, not both.")
    if expect_run:
        import yaml

        runs = (yaml.safe_load(config.read_text()) or {}).get("runs") or {}
        if expect_run not in runs:
            raise ConfigError(f"--expect-run: no run '{expect_run}' in {config} (runs: {', '.join(runs)}).")
        expect = runs[expect_run].get("expect")
    if matrix:
        tables = [t for folder in matrix for t in matrix_tables(folder, expect, metrics)]
    elif folders:
        tables = [folders_table(folders, config)]
    else:
        tables = [runs_table(config, root)]
    text = "\n".join(t.markdown() for t in tables)
    written = []
    if md:
        atomic_write_text(md, text)
        written.append(md)
    if html:
        atomic_write_text(html, html_page(title, tables))
        written.append(html)
    if into:
        if not into.is_file():
            raise DataError(f"--into: {into} does not exist.")
        atomic_write_text(into, replace_block(into.read_text(), block, text, str(into)))
        written.append(into)
    if not written:
        print(text, end="")
    return written
