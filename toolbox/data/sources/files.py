"""Reading records from one local data file, the format chosen by its suffix.

``.jsonl`` (one JSON object a line), ``.json`` (a list of objects), ``.csv`` (a header row; every
value is read as a string), ``.parquet`` and ``.arrow`` (as written by ``datasets``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from toolbox.core.errors import DataError
from toolbox.data.base import Record

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow")


def iter_jsonl(path: Path) -> Iterator[tuple[int, Record]]:
    """(line number, record) for every non-blank line; a line that is no JSON object is a DataError."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(
                    f"{path}:{number}: not valid JSON ({e.msg}); fix or delete that line."
                ) from None
            if not isinstance(record, dict):
                raise DataError(
                    f"{path}:{number}: expected a JSON object per line, got {type(record).__name__}."
                )
            yield number, record


def read_records(path: Path) -> list[Record]:
    """Every record of ``path``; its suffix must be one of ``SUFFIXES``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return [record for _, record in iter_jsonl(path)]
    if suffix == ".json":
        return _read_json(path)
    if suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            return [dict(row) for row in csv.DictReader(f)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".arrow":
        from datasets import Dataset

        return Dataset.from_file(str(path)).to_list()
    raise DataError(f"{path}: unknown data format '{suffix}'; use one of {', '.join(SUFFIXES)}.")


def _read_json(path: Path) -> list[Record]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg}).") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError(
            f"{path}: expected a JSON list of objects (one per record); use .jsonl for one per line."
        )
    return data
