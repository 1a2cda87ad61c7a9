"""Opening a store: the process lock, and the embedder and index a store must be opened with.

A store refuses, before anything is written, an embedder of another dimension or identity than the
one its vectors came from, and a store of a newer schema (``toolbox.memory.storage.row_store.read_meta``).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolbox.core.errors import ConfigError
from toolbox.memory.embedders.base import Embedder
from toolbox.memory.storage.row_store import MemoryStoreError, RowStore, read_meta


def acquire_lock(path: Path) -> int:
    """An exclusive flock on ``path/lock`` (its fd; closing it releases the lock)."""
    fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MemoryStoreError(
            f"memory store {path} is open in another process; close it there first "
            "(one process writes a store at a time)."
        ) from None
    return fd


def open_rows(
    path: Path, embedder: Embedder | Mapping[str, Any] | None
) -> tuple[RowStore, Embedder, dict[str, Any] | None, dict[str, str] | None]:
    """``memory.sqlite`` opened with the embedder it must be searched with.

    Returns ``(rows, embedder, embedder config or None, meta or None for a new store)``.
    """
    db_path = path / "memory.sqlite"
    # first an immutable read (no -wal/-shm files made): a store we refuse is left untouched
    # (it does not see a WAL that a killed process left unmerged: the second read does)
    first = read_meta(f"file:{db_path}?immutable=1", path) if db_path.exists() else None
    resolved = None
    if first is not None or embedder is not None or not db_path.exists():
        resolved = resolve_embedder(path, embedder, first)
    rows = RowStore(path)
    try:
        meta = rows.read_meta()  # the authoritative read
        if resolved is None:
            resolved = resolve_embedder(path, embedder, meta)
        elif meta is not None:
            check_embedder(path, resolved[0], meta)
    except BaseException:
        rows.close()
        raise
    return rows, resolved[0], resolved[1], meta


def resolve_embedder(
    path: Path, embedder: Embedder | Mapping[str, Any] | None, meta: dict | None
) -> tuple[Embedder, dict[str, Any] | None]:
    """The embedder to open the store with and its config (None: an object was passed)."""
    from toolbox.core.registries import EMBEDDERS

    if embedder is None:
        if meta is None:
            raise ConfigError(
                f"memory store {path} is new: give an embedder (for example {{'name': 'hashing'}} "
                "or {'name': 'minilm'})."
            )
        embedder = json.loads(meta["embedder_spec"])
        if embedder is None:
            raise ConfigError(
                f"memory store {path} was made with an embedder object ({meta['embedder']}); "
                "pass that embedder again."
            )
    spec = None
    if isinstance(embedder, Mapping):
        from toolbox.core.registry import _plain

        spec = dict(_plain(embedder))
        embedder = EMBEDDERS.build(spec, "memory.embedder")
    if meta is not None:
        check_embedder(path, embedder, meta)
    return embedder, spec


def check_embedder(path: Path, embedder: Embedder, meta: dict[str, str]) -> None:
    """Refuse an embedder whose vectors the store's cannot be compared with."""
    dim, ident = int(meta["dim"]), meta["embedder"]
    if embedder.dim != dim:
        raise MemoryStoreError(
            f"embedder {embedder.identity} makes {embedder.dim}-dimensional vectors, but memory store "
            f"{path} holds {dim}-dimensional ones from {ident}. Open it with that embedder, or "
            "export it (toolbox memory export) and add the items into a new store. The store was not changed."
        )
    if embedder.identity != ident:
        raise MemoryStoreError(
            f"memory store {path} holds vectors from {ident}, not from {embedder.identity}: "
            "their similarities would be meaningless. Open it with that embedder, or export it "
            "(toolbox memory export) and add the items into a new store. The store was not changed."
        )


def resolve_index_spec(index: Mapping[str, Any] | str | None, meta: dict | None) -> dict[str, Any]:
    """The ``VECTOR_INDEXES`` config to open with (None: the store's own; a new store: exact)."""
    from toolbox.core.registries import VECTOR_INDEXES
    from toolbox.core.registry import _plain

    if index is None:
        spec = json.loads(meta["index_spec"]) if meta else {"name": "exact"}
    elif isinstance(index, str):
        spec = {"name": index}
    else:
        spec = dict(_plain(index))
    VECTOR_INDEXES.validate(spec, "memory.index", frozenset({"dim"}))
    return spec
