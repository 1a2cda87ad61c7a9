"""Embedders in the ``EMBEDDERS`` registry: hashing, minilm, transformer, model_hidden."""

from toolbox.memory.embedders import hashing, transformer  # noqa: F401 - imported to register
from toolbox.memory.embedders.base import Embedder
from toolbox.memory.embedders.cache import CachedEmbedder

__all__ = ["CachedEmbedder", "Embedder"]
