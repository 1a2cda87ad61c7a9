"""Every data component is registered under its name and documents every parameter."""

from __future__ import annotations

import pytest

from toolbox.core.registries import COLLATORS, DATASETS, SOURCES, TOKENIZERS

EXPECTED = {
    TOKENIZERS: {"char", "bpe", "hf_tokenizer"},
    SOURCES: {"arithmetic", "local_files", "hub", "gsm8k"},
    DATASETS: {"lm_text", "prompt_completion", "chat", "preference_pairs", "prompt_only"},
    COLLATORS: {"pad", "packing"},
}


@pytest.mark.parametrize("registry", list(EXPECTED), ids=lambda r: r.kind)
def test_registered_and_documented(registry):
    assert EXPECTED[registry] <= set(registry.names())
    for name in EXPECTED[registry]:
        undocumented = [f.name for f in registry.fields(name) if not f.doc]
        assert not undocumented, f"{registry.kind} '{name}' lacks Args docs for {undocumented}"
