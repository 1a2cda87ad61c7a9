"""The train job's SLURM request from ``toolbox plan --estimate``, where the run does not set it.

``toolbox plan --estimate`` measures the train stage and writes ``work/<run>/estimate/train.json``
(toolbox/results/estimate.py): its ``slurm`` entry is the request with the stated margins
(``runtime`` = predicted wall x 1.5 in minutes, ``mem_mb`` = peak x 1.3) and its ``slices`` entry
the SHA-256 of the config slices it was measured with. The train rule asks for that ``runtime`` and
``mem_mb`` when the run's ``resources:`` leave them out; an estimate whose slices have changed since
(another model, more steps, other data) is ignored, and the defaults apply until it is remade.
When the estimate applies is toolbox/results/estimated_request.py's to say: ``launcher=slurm``
reads the same file.

The Snakefile imports this module on every call: it and what it imports use only the standard
library at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolbox.results.estimated_request import request_for_run


def estimated_request(run_dir: Path) -> dict[str, int]:
    """``runtime`` and ``mem_mb`` of the run's estimate while its slices are unchanged, else {}."""
    return request_for_run(run_dir)


def train_resources(entry: dict[str, Any], run_dir: Path, defaults: dict[str, Any]) -> dict[str, Any]:
    """The train job's resources: the run's own, else its estimate's (runtime, mem_mb), else defaults."""
    own = entry.get("resources") or {}
    estimated = {k: v for k, v in estimated_request(run_dir).items() if own.get(k) is None}
    return {**defaults, **estimated, **{k: v for k, v in own.items() if v is not None}}
