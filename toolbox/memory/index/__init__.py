"""Vector indexes behind one interface: ``exact`` (the reference) and ``hnsw`` (hnswlib)."""

from toolbox.memory.index import exact, hnsw  # noqa: F401 - imported to register
from toolbox.memory.index.base import VectorIndex

__all__ = ["VectorIndex"]
