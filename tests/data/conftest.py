"""Fixtures for the data tests: a small arithmetic data set and the tokenizers trained on it."""

from __future__ import annotations

import pytest

from toolbox.core.registries import SOURCES, TOKENIZERS


@pytest.fixture(scope="session")
def arith():
    return SOURCES.build(
        {"name": "arithmetic", "digits": 2, "operators": ["+", "-"], "num_train": 300, "num_test": 50}
    )


@pytest.fixture(scope="session")
def char_tok(arith):
    return TOKENIZERS.build({"name": "char", "model_max_length": 64}, corpus=arith.texts())


@pytest.fixture(scope="session")
def bpe_tok():
    corpus = [f"{a}+{b}={a + b}" for a in range(0, 100, 3) for b in range(0, 100, 7)]
    corpus += ["the quick brown fox jumps over the lazy dog"] * 20
    return TOKENIZERS.build({"name": "bpe", "vocab_size": 300}, corpus=iter(corpus))
