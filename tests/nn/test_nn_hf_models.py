"""tiny_llama and pretrained: Hugging Face causal LMs built from a config or loaded from disk."""

from __future__ import annotations

import time

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS

INJECTIONS = {
    "vocab_size": 48,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "in_dim": 5,
    "num_classes": 3,
    "obs_dim": 4,
    "num_actions": 2,
}


def build_llama(**settings):
    torch.manual_seed(0)
    return MODELS.build({"name": "tiny_llama", **settings}, path="model", **INJECTIONS)


def test_tiny_llama_is_a_llama_built_from_the_settings() -> None:
    from transformers import LlamaForCausalLM

    model = build_llama(hidden_size=96, num_layers=3, num_heads=3, intermediate_size=128, rope_theta=500.0)
    assert isinstance(model, LlamaForCausalLM)
    config = model.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (48, 96, 3)
    assert (config.num_attention_heads, config.num_key_value_heads, config.intermediate_size) == (3, 3, 128)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert config.rope_parameters["rope_theta"] == 500.0
    assert model.lm_head.weight is model.model.embed_tokens.weight
    logits = model(torch.randint(0, 48, (2, 6))).logits
    assert logits.shape == (2, 6, 48)


def test_tiny_llama_init_follows_the_torch_seed() -> None:
    a, b = build_llama().state_dict(), build_llama().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(1)
    c = MODELS.build({"name": "tiny_llama"}, **INJECTIONS).state_dict()
    assert not torch.equal(
        a["model.layers.0.self_attn.q_proj.weight"], c["model.layers.0.self_attn.q_proj.weight"]
    )


def test_grouped_query_attention() -> None:
    model = build_llama(hidden_size=128, num_heads=4, num_kv_heads=2)
    assert model.config.num_key_value_heads == 2
    assert model.model.layers[0].self_attn.k_proj.out_features == 64
    with pytest.raises(
        ConfigError, match=r"model\.num_kv_heads=3 must divide model\.num_heads=4; use one of \[1, 2, 4\]"
    ):
        build_llama(hidden_size=128, num_heads=4, num_kv_heads=3)


def test_heads_smaller_than_32_are_refused_with_a_valid_choice() -> None:
    with pytest.raises(ConfigError) as err:
        build_llama(hidden_size=64, num_heads=4)
    message = str(err.value)
    assert "model.num_heads=4 with model.hidden_size=64 gives attention heads of size 16" in message
    assert "set model.num_heads=2 (or model.hidden_size=128)" in message
    build_llama(hidden_size=64, num_heads=2)  # the suggested fix builds
    build_llama(hidden_size=128, num_heads=4)

    with pytest.raises(
        ConfigError, match=r"heads of size 24.*set model\.num_heads=1 \(or model\.hidden_size=64\)"
    ):
        build_llama(hidden_size=48, num_heads=2)
    with pytest.raises(ConfigError, match=r"heads of size 10.*set model\.hidden_size=64\.$"):
        build_llama(hidden_size=20, num_heads=2)
    with pytest.raises(ConfigError, match=r"model\.num_heads=3 does not divide model\.hidden_size=64"):
        build_llama(num_heads=3)


def test_tiny_llama_saves_and_reloads_with_the_same_logits(tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    model = build_llama().eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 48, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, atol=0, rtol=0)

    # and through the registry, which injects nothing into `pretrained`
    loaded = MODELS.build({"name": "pretrained", "path": str(tmp_path)}, path="model", **INJECTIONS).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    half = MODELS.build({"name": "pretrained", "path": str(tmp_path), "dtype": "bfloat16"})
    assert next(half.parameters()).dtype == torch.bfloat16


def test_pretrained_max_position_embeddings_extends_the_context_with_the_same_weights(tmp_path) -> None:
    """A model saved with 64 positions loads with 512: same weights, same logits on the first 64
    positions, a config (and so an engine's context) of 512, and a forward past 64 positions."""
    model = build_llama(max_position_embeddings=64).eval()
    model.save_pretrained(tmp_path)
    longer = MODELS.build(
        {"name": "pretrained", "path": str(tmp_path), "max_position_embeddings": 512}, path="model"
    ).eval()
    assert (model.config.max_position_embeddings, longer.config.max_position_embeddings) == (64, 512)
    saved, loaded = model.state_dict(), longer.state_dict()
    assert saved.keys() == loaded.keys()
    for name, weight in saved.items():
        assert torch.equal(weight, loaded[name]), name
    ids = torch.randint(0, 48, (1, 200))
    with torch.no_grad():
        torch.testing.assert_close(longer(ids[:, :64]).logits, model(ids[:, :64]).logits, atol=0, rtol=0)
        assert longer(ids).logits.shape == (1, 200, 48)
    with pytest.raises(ConfigError, match=r"max_position_embeddings=32 is below the saved model's 64"):
        MODELS.build(
            {"name": "pretrained", "path": str(tmp_path), "max_position_embeddings": 32}, path="model"
        )


def test_pretrained_offline_with_a_hub_id_fails_fast_naming_model_path(monkeypatch, tmp_path) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        MODELS.build({"name": "pretrained", "path": "no-such-org/no-such-model"}, path="model")
    assert time.monotonic() - start < 20  # no retries against an unreachable hub
    message = str(err.value)
    assert "model.path='no-such-org/no-such-model' is not a local directory" in message
    assert "point model.path at a local directory" in message


def test_pretrained_from_a_directory_without_a_model(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"could not load a causal language model from this directory"):
        MODELS.build({"name": "pretrained", "path": str(tmp_path)}, path="model")
    with pytest.raises(ConfigError, match=r"model\.dtype: expected"):
        MODELS.build({"name": "pretrained", "path": str(tmp_path), "dtype": "float8"}, path="model")
