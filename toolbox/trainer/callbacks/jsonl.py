"""JSONL metrics: one line per train step and per evaluation in ``run_dir/metrics.jsonl``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from toolbox.core.atomic import atomic_write_text
from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback

_RESERVED = ("step", "split")


def _plain(value: Any) -> Any:
    """A metric as JSON: tensors and numpy scalars to numbers, NaN/inf to null."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):  # a tensor with more than one element
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def truncate_after(path: Path, step: int | None) -> int:
    """Keep only the lines of ``path`` with ``step <= step`` (none when ``step`` is None).

    The file is rewritten atomically (``toolbox.core.atomic``: temp file, fsync, ``os.replace``),
    so a crash leaves either the old or the new file. Unparsable lines (a line cut by a crash) are
    dropped too. Returns the number of lines dropped.
    """
    if not path.exists():
        return 0
    kept, dropped = [], 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
                keep = step is not None and int(record["step"]) <= step
            except (ValueError, KeyError, TypeError):
                keep = False
            if keep:
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    if dropped == 0:
        return 0
    atomic_write_text(path, "".join(kept))
    return dropped


@CALLBACKS.register("jsonl")
class JsonlMetrics(Callback):
    """Append every step's and every evaluation's metrics to a JSON-lines file in the run dir.

    Each line is ``{"step": N, "split": "train" | "eval", ...metrics}`` and is flushed as it is
    written. A resumed run first drops the lines after the step it resumed from, so the file has
    no duplicate steps; a fresh run (not resumed) starts the file anew. Non-finite values are
    written as null.

    Args:
        filename: name of the file inside the run directory.
    """

    def __init__(self, filename: str = "metrics.jsonl") -> None:
        self.filename = filename
        self.path: Path | None = None
        self._file: IO[str] | None = None

    def _open(self, data: EventData) -> IO[str]:
        if self._file is None:
            run_dir = Path(data.trainer.context.run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            self.path = run_dir / self.filename
            self._file = self.path.open("a", encoding="utf-8")
        return self._file

    def on_fit_start(self, data: EventData) -> None:
        self.close()
        self.path = Path(data.trainer.context.run_dir) / self.filename
        resumed = data.payload.get("resumed_from")
        truncate_after(self.path, None if resumed is None else int(resumed))
        self._open(data)

    def write(self, data: EventData, split: str) -> None:
        record = {"step": data.step, "split": split}
        record.update({k: _plain(v) for k, v in data.metrics.items() if k not in _RESERVED})
        f = self._open(data)
        f.write(json.dumps(record) + "\n")
        f.flush()

    def on_step_end(self, data: EventData) -> None:
        self.write(data, "train")

    def on_eval_end(self, data: EventData) -> None:
        self.write(data, "eval")

    def on_fit_end(self, data: EventData) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
