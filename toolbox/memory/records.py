"""What an add accepts: texts or records, with metadata, timestamps, importances and vectors,
checked and normalised into the values the rows and the index store (or a clear error)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from toolbox.core.errors import ConfigError
from toolbox.memory.embedders.base import Embedder, normalize_rows
from toolbox.memory.metadata_filters import FilterError, dumps_metadata, to_epoch

RECORD_KEYS = ("text", "metadata", "timestamp", "importance")


def to_time(value: float | str | datetime | None, now: float, what: str = "timestamp") -> float:
    """Epoch seconds of a timestamp (epoch, ISO 8601 or datetime); None: ``now``."""
    if value is None:
        return now
    try:
        return to_epoch(value, what)
    except FilterError as e:
        raise ConfigError(str(e).replace("filter on", "value of")) from None


def from_record(record: Mapping[str, Any], metadata: Any, timestamp: Any, importance: Any) -> tuple:
    """``(text, metadata, timestamp, importance)`` of a record, the arguments as defaults."""
    unknown = set(record) - set(RECORD_KEYS)
    if "text" not in record or unknown:
        raise ConfigError(
            "a memory record is {'text': ..., 'metadata': {...}, 'timestamp': ..., 'importance': ...}"
            + (f"; unknown keys: {', '.join(sorted(unknown))}" if unknown else "; 'text' is missing")
        )
    return (
        record["text"],
        record.get("metadata", metadata),
        record.get("timestamp", timestamp),
        record.get("importance", importance),
    )


def check_text(text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"a memory's text must be a non-empty string, got {text!r}.")


@dataclass
class Batch:
    """An add's values, checked: texts, metadata dicts and their JSON, epoch stamps, unit vectors."""

    texts: list[str]
    metadatas: list[Mapping[str, Any] | None]
    meta_json: list[str]
    stamps: list[float]
    importances: list[float]
    vectors: np.ndarray


def batch(
    embedder: Embedder,
    now: float,
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any] | None] | None,
    timestamps: Sequence[float | str | datetime | None] | None,
    importances: Sequence[float] | None,
    vectors: np.ndarray | None,
) -> Batch:
    """Check an ``add_many``'s arguments and embed the texts (unless ``vectors`` are given)."""
    n = len(texts)
    metadatas = list(metadatas) if metadatas is not None else [None] * n
    timestamps = list(timestamps) if timestamps is not None else [None] * n
    importances = list(importances) if importances is not None else [0.0] * n
    if not (len(metadatas) == len(timestamps) == len(importances) == n):
        raise ConfigError("add_many: texts, metadatas, timestamps and importances must have the same length.")
    for t in texts:
        check_text(t)
    meta_json = [dumps_metadata(m) for m in metadatas]
    stamps = [to_time(t, now) for t in timestamps]
    weights = [float(x) for x in importances]
    if vectors is None:
        vectors = embedder.embed(list(texts))
    else:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (n, embedder.dim):
            raise ConfigError(
                f"add_many: vectors must have shape ({n}, {embedder.dim}), got {vectors.shape}."
            )
        vectors = normalize_rows(vectors)
    return Batch(list(texts), metadatas, meta_json, stamps, weights, vectors)
