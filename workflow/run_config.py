"""config/config.yaml: loaded and validated (the schema, then what a schema cannot say: ``init_from``
without cycles, ``data_from_traces`` naming a run with an agent, ``skip`` of optional stages only,
table rows naming runs). Snakemake validates the file against the same schema in common.smk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from result_tables import table_errors
from stages import REPO, STAGES

CONFIG_FILE = "config/config.yaml"
SCHEMA = "workflow/schemas/config.schema.yaml"


def config_errors(cfg: Any) -> list[str]:
    """Every violation of the schema, each naming the bad key and the schema path; when there is
    none, every violation of the rules across runs (run_errors)."""
    return schema_errors(cfg) or run_errors(cfg)


def schema_errors(cfg: Any) -> list[str]:
    """Every violation of the schema, each naming the bad key and the schema path."""
    import yaml
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load((REPO / SCHEMA).read_text())
    errors = sorted(
        Draft202012Validator(schema).iter_errors(cfg), key=lambda e: [str(p) for p in e.absolute_path]
    )
    lines = []
    for e in errors:
        key = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        where = "/".join(str(p) for p in e.absolute_schema_path)
        lines.append(f"{key}: {e.message} (schema: {Path(SCHEMA).name}#/{where})")
    return lines


def run_errors(cfg: dict[str, Any]) -> list[str]:
    """What the schema cannot say: an ``init_from`` that names no run or makes a cycle, a
    ``data_from_traces`` without an agent, a ``skip`` of a stage others read, a table row of no run."""
    runs = cfg["runs"]
    return init_from_errors(runs) + data_from_traces_errors(runs) + skip_errors(runs) + table_errors(cfg)


def data_from_traces_errors(runs: dict[str, Any]) -> list[str]:
    """``data_from_traces`` must name a run of the file with an ``agent`` and ``to_dataset`` (whose
    traces' dataset it reads)."""
    lines = []
    for run, entry in runs.items():
        source = entry.get("data_from_traces")
        if source is None:
            continue
        if source not in runs or not (runs[source].get("agent") and runs[source].get("to_dataset")):
            with_agent = sorted(r for r, e in runs.items() if e.get("agent") and e.get("to_dataset"))
            lines.append(
                f"runs.{run}.data_from_traces: '{source}' is not a run of this file with an agent and "
                f"to_dataset (runs with both: {', '.join(with_agent) or 'none'})"
            )
        elif source == run:
            lines.append(f"runs.{run}.data_from_traces: a run cannot train on its own traces")
    return lines


def skip_errors(runs: dict[str, Any]) -> list[str]:
    """``skip`` may name only optional stages (those no other stage reads)."""
    optional = sorted(s.name for s in STAGES if s.optional)
    return [
        f"runs.{run}.skip: '{name}' is not a stage a run may skip (these may: {', '.join(optional)})"
        for run, entry in runs.items()
        for name in entry.get("skip") or []
        if name not in optional
    ]


def init_from_errors(runs: dict[str, Any]) -> list[str]:
    """``init_from`` must name another run of the file, and following it must never come back."""
    lines = []
    for run, entry in runs.items():
        source = entry.get("init_from")
        if source is None:
            continue
        if source not in runs:
            lines.append(
                f"runs.{run}.init_from: '{source}' is not a run of this file "
                f"(the runs: {', '.join(sorted(runs))})"
            )
            continue
        chain = [run]
        while source is not None and source not in chain:
            chain.append(source)
            source = runs.get(source, {}).get("init_from")
        if source == run:
            lines.append(
                f"runs.{run}.init_from: a cycle ({' -> '.join([*chain, run])}); a run cannot start from itself"
            )
    return lines


def load_config(path: str | Path = CONFIG_FILE) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_absolute():
        path = REPO / path
    with open(path) as f:
        return yaml.safe_load(f) or {}
