"""Layers registered by role, and building them from specs with dims injected."""

from __future__ import annotations

import typing

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.errors import ConfigError, UnknownComponentError
from toolbox.core.registries import LAYERS, MODELS
from toolbox.nn import build_layer, config_path
from toolbox.nn.layers.attention import CausalSelfAttention, causal_padding_mask
from toolbox.nn.layers.feedforward import GeluFeedForward, SwiGLUFeedForward
from toolbox.nn.layers.mlp import MLP


def test_layers_are_registered_by_role() -> None:
    assert LAYERS.names() == [
        "activation/elu",
        "activation/gelu",
        "activation/relu",
        "activation/silu",
        "activation/tanh",
        "attention/mha",
        "feedforward/gelu",
        "feedforward/swiglu",
        "graph_conv/gat",
        "graph_conv/gcn",
        "graph_conv/gin",
        "graph_conv/sage",
        "mlp/dense",
        "norm/batchnorm",
        "norm/layernorm",
        "norm/rmsnorm",
        "policy_head/categorical",
        "policy_head/diag_gaussian",
    ]


@pytest.mark.parametrize("registry", [LAYERS, MODELS], ids=["layers", "models"])
def test_every_parameter_is_typed_and_documented(registry) -> None:
    for name, obj in registry:
        target = obj.__init__ if isinstance(obj, type) else obj
        typing.get_type_hints(target)  # unresolvable hints would silently switch off validation
        undocumented = [f.name for f in registry.fields(name) if not f.doc]
        assert not undocumented, f"{name}: no Args: entry for {undocumented}"


@pytest.mark.parametrize(
    ("spec", "reference"),
    [
        ("activation/relu", F.relu),
        ({"name": "activation/gelu"}, F.gelu),
        ({"name": "activation/gelu", "approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh")),
        ("activation/silu", F.silu),
        ("activation/tanh", torch.tanh),
    ],
)
def test_activations_compute_their_function(spec, reference) -> None:
    x = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(build_layer(spec, role="activation")(x), reference(x))


def test_rmsnorm_matches_its_formula_and_layernorm_has_a_bias() -> None:
    x = torch.randn(3, 8)
    rms = build_layer({"name": "norm/rmsnorm"}, dim=8)
    with torch.no_grad():
        rms.weight.copy_(torch.arange(8.0))
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * torch.arange(8.0)
    torch.testing.assert_close(rms(x), expected)

    ln = build_layer({"name": "norm/layernorm", "eps": 1e-3}, dim=8)
    assert isinstance(ln, nn.LayerNorm) and ln.eps == 1e-3 and ln.bias.shape == (8,)
    assert build_layer({"name": "norm/layernorm", "bias": False}, dim=8).bias is None


def test_build_layer_passes_only_the_dims_a_layer_accepts() -> None:
    act = build_layer("activation/relu", dim=8, num_heads=2)  # relu takes no dims: none passed
    assert isinstance(act, nn.ReLU)
    assert build_layer(None, dim=8) is None


def test_a_spec_may_not_set_an_injected_dim() -> None:
    with pytest.raises(ConfigError, match=r"norm\.dim: 'dim' is set by the builder"):
        build_layer({"name": "norm/rmsnorm", "dim": 4}, role="norm", dim=8)


def test_a_wrong_name_lists_the_valid_layer_names() -> None:
    with pytest.raises(UnknownComponentError) as err:
        build_layer({"name": "norm/rmsnrom"}, path="norm", dim=8)
    message = str(err.value)
    assert message.startswith("norm.name: unknown layer 'norm/rmsnrom'")
    assert "Did you mean 'norm/rmsnorm'?" in message
    assert "norm/layernorm" in message and "attention/mha" in message


def test_a_layer_of_the_wrong_role_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"norm\.name: 'activation/relu' is not a norm layer.*norm/layernorm, norm/rmsnorm"
    ):
        build_layer({"name": "activation/relu"}, role="norm", dim=8)


def test_nested_slots_report_their_full_key_path() -> None:
    spec = {"name": "mlp/dense", "activation": {"name": "activation/rleu"}}
    with config_path("model"), pytest.raises(UnknownComponentError, match=r"^model\.head\.activation\.name"):
        build_layer(spec, path="head", in_dim=4, out_dim=2)
    with pytest.raises(ConfigError, match=r"^mlp\.hidden_dims: expected list\[int\]"):
        build_layer({"name": "mlp/dense", "hidden_dims": "wide"}, role="mlp", in_dim=4, out_dim=2)


def test_mlp_stacks_linear_norm_activation_dropout() -> None:
    spec = {
        "name": "mlp/dense",
        "hidden_dims": [16, 8],
        "activation": {"name": "activation/gelu"},
        "norm": {"name": "norm/layernorm"},
        "dropout": 0.1,
    }
    mlp = build_layer(spec, role="mlp", in_dim=5, out_dim=3)
    assert isinstance(mlp, MLP)
    kinds = [type(m).__name__ for m in mlp.net]
    assert kinds == ["Linear", "LayerNorm", "GELU", "Dropout"] * 2 + ["Linear"]
    assert [m.out_features for m in mlp.net if isinstance(m, nn.Linear)] == [16, 8, 3]
    assert mlp(torch.randn(4, 5)).shape == (4, 3)

    plain = build_layer({"name": "mlp/dense", "hidden_dims": []}, in_dim=5, out_dim=3)
    assert [type(m) for m in plain.net] == [nn.Linear]


def test_feedforwards_keep_the_width_and_use_their_hidden_size() -> None:
    x = torch.randn(2, 3, 32)
    gelu = build_layer({"name": "feedforward/gelu"}, role="feedforward", dim=32)
    assert isinstance(gelu, GeluFeedForward) and gelu.up_proj.out_features == 128
    swiglu = build_layer({"name": "feedforward/swiglu"}, role="feedforward", dim=32)
    assert isinstance(swiglu, SwiGLUFeedForward) and swiglu.gate_proj.out_features == 96
    sized = build_layer({"name": "feedforward/swiglu", "hidden_dim": 48}, dim=32)
    assert sized.up_proj.out_features == 48
    for ffn in (gelu, swiglu, sized):
        assert ffn(x).shape == x.shape
    with torch.no_grad():
        expected = sized.down_proj(F.silu(sized.gate_proj(x)) * sized.up_proj(x))
    torch.testing.assert_close(sized(x), expected)


def _reference_attention(layer: CausalSelfAttention, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Attention written out by hand (no rotary): softmax(q k^T / sqrt(d) + mask) v."""
    b, t, d = x.shape
    h, hd = layer.num_heads, layer.head_dim
    q, k, v = (p(x).view(b, t, h, hd).transpose(1, 2) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    scores = (q @ k.transpose(-1, -2)) / hd**0.5
    scores = scores.masked_fill(~keep, float("-inf"))
    out = scores.softmax(-1) @ v
    return layer.o_proj(out.transpose(1, 2).reshape(b, t, d))


def test_attention_matches_a_hand_written_reference_with_padding() -> None:
    torch.manual_seed(0)
    layer = build_layer({"name": "attention/mha", "rotary": False}, role="attention", dim=64, num_heads=2)
    x = torch.randn(2, 5, 64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    with torch.no_grad():
        ours = layer(x, attention_mask=mask)
        ref = _reference_attention(layer, x, causal_padding_mask(mask))
        causal = layer(x)  # no mask: plain causal attention
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(causal[0], ours[0])
    assert torch.isfinite(ours).all()  # padding queries attend to themselves, not to nothing


def test_attention_is_causal_and_rotary_depends_on_position() -> None:
    torch.manual_seed(0)
    layer = build_layer({"name": "attention/mha"}, dim=64, num_heads=2)
    x = torch.randn(1, 6, 64)
    y = x.clone()
    y[:, 4:] = torch.randn(1, 2, 64)  # change the future only
    with torch.no_grad():
        out_x, out_y = layer(x), layer(y)
        shifted = layer(x, position_ids=torch.arange(3, 9)[None])
    torch.testing.assert_close(out_x[:, :4], out_y[:, :4])
    assert not torch.allclose(out_x[:, 4:], out_y[:, 4:])
    # rotary: only relative positions matter, so shifting every position changes nothing...
    torch.testing.assert_close(out_x, shifted, atol=1e-5, rtol=1e-4)
    # ...but the order of the tokens does: the first output sees only token 0 either way
    with torch.no_grad():
        swapped = layer(x[:, [1, 0, 2, 3, 4, 5]])
    assert not torch.allclose(out_x[:, 2:], swapped[:, 2:])
