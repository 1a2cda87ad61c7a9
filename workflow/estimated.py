"""The train job's SLURM request from ``toolbox plan --estimate``, where the run does not set it.

``toolbox plan --estimate`` measures the train stage and writes ``work/<run>/estimate/train.json``
(toolbox/results/estimate.py): its ``slurm`` entry is the request with the stated margins
(``runtime`` = predicted wall x 1.5 in minutes, ``mem_mb`` = peak x 1.3) and its ``slices`` entry
the SHA-256 of the config slices it was measured with. The train rule asks for that ``runtime`` and
``mem_mb`` when the run's ``resources:`` leave them out; an estimate whose slices have changed since
(another model, more steps, other data) is ignored, and the defaults apply until it is remade.

Only the standard library: the Snakefile imports this module on every call.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ESTIMATED = ("runtime", "mem_mb")  # what the estimate measures; the rest of resources: is the run's


def estimate_file(run_dir: Path) -> Path:
    return run_dir / "estimate" / "train.json"


def estimated_request(run_dir: Path) -> dict[str, int]:
    """``runtime`` and ``mem_mb`` of the run's estimate while its slices are unchanged, else {}."""
    try:
        record = json.loads(estimate_file(run_dir).read_text())
        slices, request = record["slices"], record["slurm"]
        for name, digest in slices.items():
            if hashlib.sha256((run_dir / "config" / name).read_bytes()).hexdigest() != digest:
                return {}
        return {key: int(request[key]) for key in ESTIMATED if key in request}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # no estimate, an unreadable one, or one of an older format: the defaults apply


def train_resources(entry: dict[str, Any], run_dir: Path, defaults: dict[str, Any]) -> dict[str, Any]:
    """The train job's resources: the run's own, else its estimate's (runtime, mem_mb), else defaults."""
    own = entry.get("resources") or {}
    estimated = {k: v for k, v in estimated_request(run_dir).items() if own.get(k) is None}
    return {**defaults, **estimated, **{k: v for k, v in own.items() if v is not None}}
