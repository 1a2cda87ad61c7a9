"""Rows → a ``datasets`` folder, streamed: each split's rows go through datasets' ``ArrowWriter`` (a
batch of rows in memory at a time) into an Arrow file beside the target, then ``save_to_disk``
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

    def __init__(self, out: Path) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        self.writers: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    def add(self, split: str, row: dict[str, Any], features) -> None:
        writer = self.writers.get(split)
        if writer is None:
            from datasets.arrow_writer import ArrowWriter

            writer = self.writers[split] = ArrowWriter(
                features=features, path=str(self.tmp / f"{split}.arrow")
            )
            self.counts[split] = 0
        writer.write(row)
        self.counts[split] += 1

    def _finish(self, finalize: bool = True) -> None:
        writers, self.writers = self.writers, {}
        for w in writers.values():
            if finalize:
                w.finalize()  # the rows still in memory, then the stream closed
            else:
                w.close()

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
