"""Our own models' save format: ``config.json`` naming the registered model and its settings, and
``model.safetensors``, so that a trained run's ``model/`` folder is rebuilt by the ``pretrained``
model exactly as a Hugging Face folder is.

::

    model/config.json         {"toolbox_model": "gnn", "settings": {"in_dim": 1433, ...}}
    model/model.safetensors   the state dict (safetensors' save_model: shared tensors kept once)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from toolbox.core.errors import ConfigError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
MODEL_KEY = "toolbox_model"


class SavedModel:
    """Mixin for a registered ``nn.Module`` that records its constructor ``settings`` (injected facts
    included): gives it ``save_pretrained``, which the checkpoint callback's export calls."""

    registry_name: str
    settings: dict[str, Any]

    def save_pretrained(self, path: str | Path, state_dict: dict[str, Any] | None = None) -> None:
        from safetensors.torch import save_file, save_model

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = {MODEL_KEY: self.registry_name, "settings": self.settings}
        (path / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if state_dict is None:
            save_model(self, str(path / WEIGHTS))
        else:
            save_file({k: v.contiguous() for k, v in state_dict.items()}, str(path / WEIGHTS))


def saved_model_spec(path: str | Path) -> dict[str, Any] | None:
    """The model spec (``{"name": ..., **settings}``) of a folder written by ``save_pretrained``
    above, or None when the folder holds something else (a Hugging Face model)."""
    config = Path(path) / CONFIG
    if not config.is_file():
        return None
    try:
        content = json.loads(config.read_text())
    except json.JSONDecodeError:
        return None
    if not isinstance(content, dict) or MODEL_KEY not in content:
        return None
    return {"name": content[MODEL_KEY], **content.get("settings", {})}


def load_saved_model(path: str | Path) -> nn.Module | None:
    """Rebuild the registered model a ``model/`` folder names and load its weights; None if the
    folder is not one of ours."""
    spec = saved_model_spec(path)
    if spec is None:
        return None
    from safetensors.torch import load_model

    from toolbox.core.registries import MODELS

    weights = Path(path) / WEIGHTS
    if not weights.is_file():
        raise ConfigError(f"model.path={str(path)!r}: {WEIGHTS} is missing; the folder is incomplete.")
    model = MODELS.build(spec, "model")
    load_model(model, str(weights))
    return model
