"""Episodic memory: a crash-safe store of texts with metadata, embedders and vector indexes.

``EpisodicMemory`` (``toolbox.memory.store``) adds, searches (filters, recency, text match),
updates, deletes and keeps the history of memories; ``toolbox.memory.embedders`` turns texts into
vectors; ``toolbox.memory.index`` searches them; ``toolbox.memory.writer`` is the training
callback that writes what a model got wrong into a store. See docs/memory.md.
"""

from toolbox.memory.store import EpisodicMemory, MemoryItem, MemoryStoreError

__all__ = ["EpisodicMemory", "MemoryItem", "MemoryStoreError"]
