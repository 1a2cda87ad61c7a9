"""Episodic memory: a crash-safe store of texts with metadata, embedders and vector indexes.

``EpisodicMemory`` (``toolbox.memory.store``) adds, searches (filters, recency, text match),
updates, deletes and keeps the history of memories; ``toolbox.memory.embedders`` turns texts into
vectors; ``toolbox.memory.index`` searches them; ``toolbox.memory.episodes`` writes and recalls agent
episodes (the training callback that writes what a model got wrong is
``toolbox.trainer.callbacks.memory_writer``). See docs/memory.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EpisodicMemory", "MemoryItem", "MemoryStoreError"]


def __getattr__(name: str) -> Any:  # lazy: `toolbox --help` imports toolbox.memory.cli, not numpy
    if name in __all__:
        from toolbox.memory import store

        return getattr(store, name)
    raise AttributeError(f"module 'toolbox.memory' has no attribute {name!r}")
