"""The tables of config/config.yaml: the mean ± std of one eval metric over each row's runs (seeds)
beside the row's reference number (a paper's), written by ``toolbox table`` (rule ``table``).

Only the standard library: the Snakefile imports this module on every call.
"""

from __future__ import annotations

import fnmatch
import shlex
from typing import Any

from runs import upstream_runs
from stages import PATHS

# A table of config/config.yaml (``tables: {name: {metric, scale, rows: {label: {runs, reference}}}}``)
# is the mean ± std of one eval metric over each row's runs (seeds), beside the row's reference
# number (a paper's): ``toolbox table`` reads the runs' eval.json and writes the Markdown and JSON.
TABLE_PATHS = {"md": "results/tables/{table}.md", "json": "results/tables/{table}.json"}
TABLE_LOG = "work/_tables/logs/{table}.log"


def table_log(name: str) -> str:
    return TABLE_LOG.format(table=name)


def table_runs(row: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """A row's runs: a list of run names, or one glob over them (``gcn_cora_s*``)."""
    pattern = row["runs"]
    if isinstance(pattern, str):
        return sorted(r for r in runs if fnmatch.fnmatchcase(r, pattern))
    return list(pattern)


def table_deps(table: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    return [PATHS["eval"].format(run=r) for row in table["rows"].values() for r in table_runs(row, runs)]


def table_upstream(table: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """The table's runs and the runs their outputs come from (``init_from``, ``data_from_traces``)."""
    named = [r for row in table["rows"].values() for r in table_runs(row, runs)]
    return list(dict.fromkeys(r for run in named for r in [run, *upstream_runs(run, runs)]))


def table_command(name: str, table: dict[str, Any], runs: dict[str, Any]) -> str:
    """The table's ``toolbox table`` command (one ``--row`` per row: label, reference, eval files)."""
    parts = ["toolbox table", "--metric", shlex.quote(table["metric"]), "--scale", str(table.get("scale", 1))]
    for label, row in table["rows"].items():
        evals = [PATHS["eval"].format(run=r) for r in table_runs(row, runs)]
        parts += ["--row", shlex.quote(str(label)), shlex.quote(str(row.get("reference", "")) or "-"), *evals]
    parts += ["--title", shlex.quote(str(table.get("title", name)))]
    parts += ["--out", TABLE_PATHS["md"].format(table=name), "--json", TABLE_PATHS["json"].format(table=name)]
    return " ".join(parts)


def table_errors(cfg: dict[str, Any]) -> list[str]:
    """Every row must name at least one run of the file."""
    runs, lines = cfg["runs"], []
    for name, table in (cfg.get("tables") or {}).items():
        for label, row in table["rows"].items():
            found = table_runs(row, runs)
            unknown = [r for r in found if r not in runs]
            if unknown or not found:
                lines.append(
                    f"tables.{name}.rows.{label}.runs: {', '.join(unknown) or repr(row['runs'])} "
                    f"names no run of this file (the runs: {', '.join(sorted(runs))})"
                )
    return lines
