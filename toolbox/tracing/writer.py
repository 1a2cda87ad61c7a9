"""Rows → a ``datasets`` folder, streamed: JSON lines spilled per split, read back by pyarrow's JSON
reader in blocks into datasets' Arrow cache, ``save_to_disk`` beside the target, renamed into place.

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
    """Spill rows (JSON lines) per split into a temporary folder beside ``out``; ``save`` writes the
    dataset folder there, ``publish`` adds the card and renames it onto ``out``; ``close`` removes
    what is left (call it in a ``finally``)."""

    def __init__(self, out: Path, splits: tuple[str, ...] = ("train", "test")) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        self.files = {name: open(self.tmp / f"{name}.jsonl", "w", encoding="utf-8") for name in splits}
        self.counts = dict.fromkeys(splits, 0)

    def add(self, split: str, line: str) -> None:
        self.files[split].write(line)
        self.files[split].write("\n")
        self.counts[split] += 1

    def _close_files(self) -> None:
        for f in self.files.values():
            f.close()

    def save(self, features, progress: bool = False) -> dict[str, int]:
        """Write the dataset (not yet in place); returns its rows per split."""
        import datasets
        from datasets import Dataset, DatasetDict

        self._close_files()
        splits = {}
        if not progress:
            datasets.disable_progress_bars()
        try:
            for name, n in self.counts.items():
                if n:  # pyarrow's JSON reader, in blocks, into datasets' Arrow cache: bounded memory
                    splits[name] = Dataset.from_json(
                        str(self.tmp / f"{name}.jsonl"), features=features, cache_dir=str(self.tmp / "cache")
                    )
            dd = DatasetDict(splits)
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
        self._close_files()
        shutil.rmtree(self.tmp, ignore_errors=True)
