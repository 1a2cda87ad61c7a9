"""The hashing embedder: signed feature hashing of words and character n-grams (no dependencies).

Deterministic across processes and machines (BLAKE2b, not Python's salted ``hash``), so tests pin
its similarities. It knows spelling, not meaning: "car" and "automobile" share nothing.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from toolbox.core.registries import EMBEDDERS
from toolbox.memory.embedders.base import Embedder

_WORD = re.compile(r"\w+", re.UNICODE)


@EMBEDDERS.register("hashing")
class HashingEmbedder(Embedder):
    """Bag of lower-cased words and their character n-grams, hashed into ``dim`` signed buckets.

    Args:
        dim: output dimension.
        ngram: character n-gram length taken from each word padded with '<' and '>' (0: words only).
        ngram_weight: weight of one n-gram relative to one word.
        seed: salt of the hash; another seed gives unrelated vectors.
        batch_size: texts per batch.
    """

    def __init__(
        self, dim: int = 384, ngram: int = 3, ngram_weight: float = 0.5, seed: int = 0, batch_size: int = 256
    ) -> None:
        if dim < 1:
            raise ValueError(f"embedder.dim must be >= 1, got {dim}")
        self.dim, self.ngram, self.ngram_weight, self.seed = dim, ngram, ngram_weight, seed
        self.batch_size = batch_size
        self._salt = str(seed).encode()
        self._buckets: dict[str, tuple[int, float]] = {}

    @property
    def identity(self) -> str:
        return f"hashing(dim={self.dim},ngram={self.ngram},ngram_weight={self.ngram_weight},seed={self.seed})"

    def _bucket(self, feature: str) -> tuple[int, float]:
        hit = self._buckets.get(feature)
        if hit is None:
            digest = hashlib.blake2b(feature.encode(), digest_size=8, key=self._salt).digest()
            h = int.from_bytes(digest, "little")
            hit = (h % self.dim, 1.0 if (h >> 63) & 1 else -1.0)
            if len(self._buckets) < 1_000_000:
                self._buckets[feature] = hit
        return hit

    def features(self, text: str) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        for word in _WORD.findall(text.lower()):
            out.append((f"w:{word}", 1.0))
            if self.ngram > 0:
                padded = f"<{word}>"
                for i in range(max(1, len(padded) - self.ngram + 1)):
                    out.append((f"c:{padded[i : i + self.ngram]}", self.ngram_weight))
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self.features(text):
                col, sign = self._bucket(feature)
                out[row, col] += sign * weight
        return out
