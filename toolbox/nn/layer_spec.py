"""Layer specs: how a component's slot names the layer that fills it.

A *layer spec* is a config mapping whose ``name`` selects a layer registered in ``LAYERS`` and whose
other keys are that layer's settings; a bare string is shorthand for ``{"name": ...}``::

    norm: {name: norm/layernorm, eps: 1.0e-5}
    activation: activation/gelu

Layer names read ``<role>/<kind>``. The component that owns a slot builds it with
:func:`build_layer`, injecting the dimensions it knows (``dim``, ``in_dim``, ``out_dim``,
``num_heads``): a layer receives only those its constructor accepts, and a spec may not set them.

Error messages name the full config key path of a slot (``model.norm.name``). A component tells
nested builds where it sits with :func:`config_path`; :func:`build_layer` does so for the layer it
builds, so a slot inside a layer inside a model reports ``model.head.activation``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, overload

from toolbox.core.errors import ConfigError
from toolbox.core.registries import LAYERS
from toolbox.core.registry import NAME_KEY

if TYPE_CHECKING:
    from torch import nn

LayerSpec = Mapping[str, Any] | str
"""A config node selecting a layer: ``{"name": "<role>/<kind>", **settings}`` or just the name."""

_CURRENT_PATH: ContextVar[str] = ContextVar("toolbox_nn_config_path", default="")


@contextmanager
def config_path(path: str) -> Iterator[None]:
    """Declare the config key path of the component being built, for the slots it builds.

    Args:
        path: the key path of the component's config node, e.g. ``"model"``.
    """
    token = _CURRENT_PATH.set(path)
    try:
        yield
    finally:
        _CURRENT_PATH.reset(token)


@overload
def build_layer(spec: None, *, path: str | None = None, role: str | None = None, **dims: Any) -> None: ...


@overload
def build_layer(
    spec: LayerSpec, *, path: str | None = None, role: str | None = None, **dims: Any
) -> nn.Module: ...


def build_layer(
    spec: LayerSpec | None, *, path: str | None = None, role: str | None = None, **dims: Any
) -> nn.Module | None:
    """Build the layer ``spec`` names, passing on the ``dims`` its constructor accepts.

    Args:
        spec: the layer spec; ``None`` (an empty optional slot) builds nothing and returns ``None``.
        path: the slot's key, relative to the enclosing :func:`config_path` (default: ``role``),
            used in error messages.
        role: when given, the spec must name a layer of this role (``norm`` accepts ``norm/*``).
        **dims: dimensions known to the slot's owner (``dim=64``, ``num_heads=2``, ...).

    Returns:
        The built ``torch.nn.Module``, or ``None`` for a ``None`` spec.

    Raises:
        ConfigError: the spec names an unknown layer (the message lists the valid names), a layer
            of the wrong role, an unknown setting, a value of the wrong type, or sets an injected dim.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = {NAME_KEY: spec}
    full_path = ".".join(p for p in (_CURRENT_PATH.get(), path or role or "layer") if p)
    if role is not None:
        _check_role(spec, role, full_path)
    with config_path(full_path):
        layer = LAYERS.build(spec, path=full_path, **dims)

    from torch import nn

    if not isinstance(layer, nn.Module):
        raise ConfigError(
            f"{full_path}: layer '{spec[NAME_KEY]}' built a {type(layer).__name__}, not a torch.nn.Module."
        )
    return layer


def _check_role(spec: Mapping[str, Any], role: str, path: str) -> None:
    """Refuse a known layer of another role; unknown names are left to the registry's message."""
    name = spec.get(NAME_KEY) if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or name not in LAYERS or name.startswith(f"{role}/"):
        return
    valid = [n for n in LAYERS.names() if n.startswith(f"{role}/")]
    raise ConfigError(
        f"{path}.{NAME_KEY}: '{name}' is not a {role} layer; this slot takes one of: {', '.join(valid)}."
    )
