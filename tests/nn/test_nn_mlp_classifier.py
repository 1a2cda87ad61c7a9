"""mlp_classifier: features to class logits."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from toolbox.core.errors import UnknownComponentError
from toolbox.core.registries import MODELS

INJECTIONS = {"vocab_size": 100, "in_dim": 2, "num_classes": 3, "obs_dim": 4, "num_actions": 2}


def build(**settings) -> nn.Module:
    torch.manual_seed(0)
    return MODELS.build({"name": "mlp_classifier", **settings}, path="model", **INJECTIONS)


def test_builds_with_injected_dims_and_slots() -> None:
    model = build(
        hidden_dims=[16, 8], activation={"name": "activation/tanh"}, norm={"name": "norm/layernorm"}
    )
    kinds = [type(m) for m in model.net]
    assert kinds == [nn.Linear, nn.LayerNorm, nn.Tanh] * 2 + [nn.Linear]
    assert model.net[0].in_features == 2 and model.net[-1].out_features == 3
    assert model(torch.randn(5, 2)).shape == (5, 3)
    assert [type(m) for m in build().net] == [nn.Linear, nn.ReLU, nn.Linear]


def test_a_wrong_activation_name_names_the_model_key() -> None:
    with pytest.raises(
        UnknownComponentError, match=r"^model\.activation\.name: unknown layer 'activation/rleu'"
    ):
        build(activation={"name": "activation/rleu"})


def test_learns_three_separable_blobs() -> None:
    model = build(hidden_dims=[32], dropout=0.1)
    centers = torch.tensor([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    labels = torch.arange(3).repeat_interleave(50)
    x = centers[labels] + 0.5 * torch.randn(150, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(100):
        loss = nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(-1) == labels).float().mean().item()
    assert accuracy > 0.97
