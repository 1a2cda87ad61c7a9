"""transformer_lm: our own causal LM built from layer specs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.core.registries import MODELS
from toolbox.nn.layers.attention import CausalSelfAttention
from toolbox.nn.layers.feedforward import GeluFeedForward, SwiGLUFeedForward
from toolbox.nn.models.transformer_lm import TransformerLM

INJECTIONS = {"vocab_size": 40, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "in_dim": 7}


def build(**settings) -> TransformerLM:
    torch.manual_seed(0)
    return MODELS.build({"name": "transformer_lm", **settings}, path="model", **INJECTIONS)


def test_builds_with_injections_and_returns_logits_and_loss() -> None:
    model = build()
    assert isinstance(model, TransformerLM)
    assert model.embed_tokens.num_embeddings == 40 and len(model.layers) == 2
    assert model.lm_head.weight is model.embed_tokens.weight  # tied by default
    ids = torch.randint(0, 40, (3, 9))
    out = model(ids)
    assert out.logits.shape == (3, 9, 40) and out.loss is None

    labels = ids.clone()
    labels[:, :4] = -100
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[:, 3:-1].reshape(-1, 40), ids[:, 4:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)


def test_swapping_specs_changes_the_module_types() -> None:
    default = build()
    block = default.layers[0]
    assert isinstance(block.attn_norm, nn.RMSNorm) and isinstance(default.norm, nn.RMSNorm)
    assert isinstance(block.feedforward, SwiGLUFeedForward)
    assert isinstance(block.attention, CausalSelfAttention)

    swapped = build(
        norm={"name": "norm/layernorm"},
        feedforward={"name": "feedforward/gelu", "hidden_dim": 96},
        attention={"name": "attention/mha", "bias": True},
    )
    block = swapped.layers[1]
    assert isinstance(block.attn_norm, nn.LayerNorm) and isinstance(block.ffn_norm, nn.LayerNorm)
    assert isinstance(swapped.norm, nn.LayerNorm)
    assert isinstance(block.feedforward, GeluFeedForward) and block.feedforward.up_proj.out_features == 96
    assert block.attention.q_proj.bias is not None
    assert swapped(torch.randint(0, 40, (2, 5))).logits.shape == (2, 5, 40)


def test_a_wrong_layer_name_lists_the_valid_names() -> None:
    with pytest.raises(UnknownComponentError) as err:
        build(norm={"name": "norm/rmsnrom"})
    message = str(err.value)
    assert message.startswith("model.norm.name: unknown layer 'norm/rmsnrom'. Did you mean 'norm/rmsnorm'?")
    assert "norm/layernorm" in message and "feedforward/swiglu" in message


def test_slot_errors_name_the_model_key() -> None:
    with pytest.raises(ConfigError, match=r"^model\.feedforward\.name: 'norm/rmsnorm' is not a feedforward"):
        build(feedforward={"name": "norm/rmsnorm"})
    with pytest.raises(ConfigError, match=r"^model\.attention\.num_heads: 'num_heads' is set by the builder"):
        build(attention={"name": "attention/mha", "num_heads": 4})
    with pytest.raises(ConfigError, match=r"model\.num_heads=3 does not divide model\.hidden_size=64"):
        build(num_heads=3)


def test_loss_drops_on_a_repeated_sequence() -> None:
    model = build()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12] * 4] * 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 3.0  # about log(40) at random init
    assert losses[-1] < 0.2 * losses[0]


def test_left_padding_gives_the_logits_of_the_unpadded_sequence() -> None:
    model = build().eval()
    seq = torch.tensor([[3, 9, 4, 17, 5]])
    padded = torch.tensor([[0, 0, 3, 9, 4, 17, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        alone = model(seq).logits
        batched = model(padded, attention_mask=mask).logits
    torch.testing.assert_close(batched[:, 2:], alone, atol=1e-5, rtol=1e-4)
    assert torch.isfinite(batched).all()


def test_too_long_a_sequence_is_refused() -> None:
    model = build(max_position_embeddings=8)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_default_slots_compute_exactly_what_llama_computes() -> None:
    """Llama's weights, renamed, load into transformer_lm and give the same logits and loss."""
    torch.manual_seed(1)
    llama = MODELS.build({"name": "tiny_llama", "intermediate_size": 128}, vocab_size=40).eval()
    ours = build(feedforward={"name": "feedforward/swiglu", "hidden_dim": 128}).eval()
    renames = [
        ("model.", ""),
        ("input_layernorm", "attn_norm"),
        ("post_attention_layernorm", "ffn_norm"),
        ("self_attn", "attention"),
        ("mlp", "feedforward"),
    ]
    state = {}
    for key, value in llama.state_dict().items():
        for old, new in renames:
            key = key.replace(old, new)
        state[key] = value
    ours.load_state_dict(state)

    ids = torch.randint(0, 40, (2, 11))
    with torch.no_grad():
        expected = llama(ids, labels=ids)
        got = ours(ids, labels=ids)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-5, rtol=1e-4)
