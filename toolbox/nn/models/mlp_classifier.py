"""``mlp_classifier``: an MLP from feature vectors to class logits."""

from __future__ import annotations

from typing import Any

from torch import nn

from toolbox.core.bounds import AtLeastOne, Fraction
from toolbox.core.registries import MODELS
from toolbox.nn.layer_spec import config_path
from toolbox.nn.layers.mlp import MLP


@MODELS.register("mlp_classifier")
def mlp_classifier(
    in_dim: AtLeastOne,
    num_classes: AtLeastOne,
    hidden_dims: list[AtLeastOne] = [64],  # noqa: B006 - a config default, never mutated
    activation: dict[str, Any] = {"name": "activation/relu"},  # noqa: B006
    norm: dict[str, Any] | None = None,
    dropout: Fraction = 0.0,
) -> nn.Module:
    """An MLP (``mlp/dense``) whose ``forward(x)`` maps ``(batch, in_dim)`` features to
    ``(batch, num_classes)`` logits.

    Args:
        in_dim: size of the input features; injected from the data.
        num_classes: number of classes (output logits); injected from the data.
        hidden_dims: sizes of the hidden layers, in order; empty for a linear classifier.
        activation: layer spec of the activation after each hidden layer, e.g.
            ``{"name": "activation/gelu"}``.
        norm: layer spec of a norm after each hidden Linear, e.g. ``{"name": "norm/layernorm"}``;
            ``None`` for none.
        dropout: dropout probability after each hidden activation; 0 disables it.
    """
    with config_path("model"):
        return MLP(
            in_dim,
            num_classes,
            hidden_dims=hidden_dims,
            activation=activation,
            norm=norm,
            dropout=dropout,
        )
