"""Rows → a ``datasets`` folder, streamed: each split's rows, 1000 at a time converted by pyarrow,
go through datasets' ``ArrowWriter`` into an Arrow file beside the target, then ``save_to_disk``
beside it too, renamed into place. (Spilling JSON lines for ``Dataset.from_json`` cost 115 MB more
at 168k rows, growing with the rows: pyarrow's JSON reader holds what it parses.)

The Arrow features are fixed from the format (and, for a column that is text or messages, from the
first row), so rows with and without tool calls share one schema; ``misfit`` names the column of a
later row that does not fit them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def features_for(format: str, row: dict[str, Any]):
    """Fixed Arrow features, so that rows with and without tool calls share one schema."""
    from datasets import Features, List, Value

    message = {
        "role": Value("string"),
        "content": Value("string"),
        "tool_calls": List(
            {
                "id": Value("string"),
                "type": Value("string"),
                "function": {"name": Value("string"), "arguments": Value("string")},
            }
        ),
        "tool_call_id": Value("string"),
    }

    def col(v: Any):
        return Value("string") if isinstance(v, str) else List(message)

    if format == "sft":
        return Features({"messages": List(message), "tools": Value("string")})
    if format == "preference":
        return Features(
            {
                "prompt": col(row["prompt"]),
                "chosen": col(row["chosen"]),
                "rejected": col(row["rejected"]),
                "score_chosen": Value("float64"),
                "score_rejected": Value("float64"),
            }
        )
    if format == "kto":
        return Features(
            {"prompt": col(row["prompt"]), "completion": col(row["completion"]), "label": Value("bool")}
        )
    return Features({"prompt": col(row["prompt"])})


def misfit(row: dict[str, Any], features) -> str | None:
    """None if the row fits the features chosen from the first row (text vs messages), else the column."""
    from datasets import Value

    for k, f in features.items():
        if (
            isinstance(f, Value)
            and f.dtype == "string"
            and row.get(k) is not None
            and not isinstance(row[k], str)
        ):
            return k
        if not isinstance(f, Value) and isinstance(row.get(k), str):
            return k
    return None


class SplitWriter:
    """Write rows per split into a temporary folder beside ``out``; ``save`` writes the dataset
    folder there, ``publish`` adds the card and renames it onto ``out``; ``close`` removes what is
    left (call it in a ``finally``)."""

    BATCH = 1000  # rows per split held in memory before they are written as one Arrow table

    def __init__(self, out: Path) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        self.writers: dict[str, Any] = {}
        self.pending: dict[str, list[dict[str, Any]]] = {}
        self.counts: dict[str, int] = {}
        self.schema = None

    def add(self, split: str, row: dict[str, Any], features) -> None:
        rows = self.pending.get(split)
        if rows is None:
            from datasets.arrow_writer import ArrowWriter

            self.writers[split] = ArrowWriter(features=features, path=str(self.tmp / f"{split}.arrow"))
            self.schema = features.arrow_schema
            rows = self.pending[split] = []
            self.counts[split] = 0
        rows.append(row)
        self.counts[split] += 1
        if len(rows) >= self.BATCH:
            self._write(split)

    def _write(self, split: str) -> None:
        import pyarrow as pa

        rows, self.pending[split] = self.pending[split], []
        if rows:  # converted by pyarrow in C++ (these features hold no type that needs encoding)
            self.writers[split].write_table(pa.Table.from_pylist(rows, schema=self.schema))

    def _finish(self, finalize: bool = True) -> None:
        for split, w in self.writers.items():
            if finalize:
                self._write(split)
                w.finalize()  # then the stream closed
            else:
                w.close()
        self.writers = {}

    def save(self, progress: bool = False) -> dict[str, int]:
        """Write the dataset (not yet in place); returns its rows per split."""
        import datasets
        from datasets import Dataset, DatasetDict

        names = [n for n in ("train", "test") if self.counts.get(n)] + sorted(
            n for n in self.counts if n not in ("train", "test") and self.counts[n]
        )
        self._finish()
        if not progress:
            datasets.disable_progress_bars()
        try:
            dd = DatasetDict({n: Dataset.from_file(str(self.tmp / f"{n}.arrow")) for n in names})
            dd.save_to_disk(str(self.tmp / "dataset"))
        finally:
            if not progress:
                datasets.enable_progress_bars()
        return {k: len(v) for k, v in dd.items()}

    def publish(self, card: dict[str, Any], readme: str) -> None:
        """Add ``card.json`` and ``README.md`` and rename the folder onto ``out`` (an old one replaced)."""
        (self.tmp / "dataset" / "card.json").write_text(json.dumps(card, indent=2) + "\n")
        (self.tmp / "dataset" / "README.md").write_text(readme)
        if self.out.exists():
            old = self.out.with_name(f".{self.out.name}.old-{os.getpid()}")
            os.replace(self.out, old)
            os.replace(self.tmp / "dataset", self.out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp / "dataset", self.out)

    def close(self) -> None:
        try:
            self._finish(finalize=False)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
