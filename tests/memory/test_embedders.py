"""Embedders: the hashing embedder, the cache, mean pooling of a transformers encoder and of a
toolbox model's hidden states (checked against a direct computation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EMBEDDERS, TOKENIZERS
from toolbox.memory.embedders import CachedEmbedder
from toolbox.memory.embedders.hashing import HashingEmbedder

TEXTS = ["the cat sat on the mat", "a much longer sentence about dogs that bark at night", "cat"]


def test_hashing_is_deterministic_unit_and_pinned():
    e = EMBEDDERS.build({"name": "hashing", "dim": 32})
    v = e.embed(TEXTS)
    assert v.shape == (3, 32) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(v, HashingEmbedder(dim=32).embed(TEXTS))  # no salted hash()
    assert float(v[0] @ v[2]) == pytest.approx(0.5808, abs=1e-4)  # pinned: shares the word "cat"
    assert float(v[0] @ HashingEmbedder(dim=32, seed=1).embed(TEXTS[:1])[0]) != pytest.approx(1.0)
    assert e.embed([]).shape == (0, 32)
    with pytest.raises(TypeError, match="embedders take strings"):
        e.embed([3])


def test_cache_embeds_each_text_once(tmp_path):
    inner = HashingEmbedder(dim=16)
    cached = CachedEmbedder(inner, tmp_path / "cache.sqlite")
    first = cached.embed(TEXTS + TEXTS[:1])
    assert (cached.misses, cached.hits) == (3, 0)
    np.testing.assert_array_equal(first, inner.embed(TEXTS + TEXTS[:1]))
    cached.close()
    again = CachedEmbedder(HashingEmbedder(dim=16), tmp_path / "cache.sqlite")  # read back from disk
    np.testing.assert_array_equal(again.embed(TEXTS), first[:3])
    assert (again.misses, again.hits) == (0, 3)
    other = CachedEmbedder(HashingEmbedder(dim=16, seed=3), tmp_path / "cache.sqlite")  # keyed by embedder
    assert not np.allclose(other.embed(TEXTS[:1]), first[:1]) and other.misses == 1


@pytest.fixture(scope="module")
def tokenizer():
    tok = TOKENIZERS.build({"name": "char"}, corpus=TEXTS)
    assert tok.pad_token_id is not None
    return tok


def _mean_pool(hidden, mask):
    m = mask.unsqueeze(-1).float()
    v = (hidden * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(v, dim=-1).numpy()


def test_transformer_encoder_mean_pooling(tmp_path, tokenizer):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertModel(config).save_pretrained(tmp_path / "enc")
    tokenizer.save_pretrained(tmp_path / "enc")
    e = EMBEDDERS.build({"name": "transformer", "path": str(tmp_path / "enc"), "batch_size": 2})
    got = e.embed(TEXTS)
    model = BertModel.from_pretrained(tmp_path / "enc").eval()
    for text, row in zip(TEXTS, got, strict=True):  # each text alone, no padding
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        np.testing.assert_allclose(row, _mean_pool(hidden, enc["attention_mask"])[0], atol=1e-5)
    assert e.dim == 32 and e.identity.startswith("transformer(enc@")
    with pytest.raises(ConfigError, match="holds no transformers model"):
        EMBEDDERS.build({"name": "transformer", "path": str(tmp_path)})


def test_model_hidden_states_of_a_causal_lm(tmp_path, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolbox.memory.embedders.transformer import ModelHiddenEmbedder

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=128,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    e = EMBEDDERS.build({"name": "model_hidden", "path": str(tmp_path / "lm"), "layer": 1})
    got = e.embed(TEXTS)  # batched: padded to the longest text
    model = LlamaForCausalLM.from_pretrained(tmp_path / "lm").eval()
    for text, row in zip(TEXTS, got, strict=True):
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            out = model(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True
            )
        np.testing.assert_allclose(row, _mean_pool(out.hidden_states[1], enc["attention_mask"])[0], atol=1e-5)
    live = ModelHiddenEmbedder(model=model, tokenizer=tokenizer, layer=1)  # the objects, as in training
    np.testing.assert_allclose(live.embed(TEXTS), got, atol=1e-6)
    with pytest.raises(ConfigError, match="needs path"):
        ModelHiddenEmbedder()
