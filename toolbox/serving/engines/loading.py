"""What every engine needs around a model: loading one from a folder, saving one for a server, eos ids."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from toolbox.core.errors import ConfigError


def load_model_and_tokenizer(path: str, dtype: str = "float32") -> tuple[Any, Any]:
    """A causal LM and its tokenizer from a folder written by ``save_pretrained`` (or a hub id)."""
    from toolbox.core.registries import MODELS, TOKENIZERS

    model = MODELS.build({"name": "pretrained", "path": path, "dtype": dtype}, path="engine.path")
    tokenizer = TOKENIZERS.build({"name": "hf_tokenizer", "path": path}, path="engine.path")
    return model.eval(), tokenizer


def resolve(model: Any, tokenizer: Any, path: str | None, dtype: str, engine: str) -> tuple[Any, Any]:
    """The model and tokenizer an engine was given, or the ones loaded from ``path``."""
    if model is None and path is None:
        raise ConfigError(
            f"engine '{engine}' needs a model: pass model= and tokenizer= to ENGINES.build, or set "
            f"engine.path to a folder written by save_pretrained."
        )
    if model is None:
        loaded_model, loaded_tokenizer = load_model_and_tokenizer(path, dtype)  # type: ignore[arg-type]
        return loaded_model, tokenizer if tokenizer is not None else loaded_tokenizer
    if tokenizer is None:
        if path is None:
            raise ConfigError(f"engine '{engine}' was given a model but no tokenizer; pass tokenizer=.")
        from toolbox.core.registries import TOKENIZERS

        tokenizer = TOKENIZERS.build({"name": "hf_tokenizer", "path": path}, path="engine.path")
    return model, tokenizer


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a completion: the tokenizer's eos and the model's generation-config eos."""
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if eos is not None:
        ids.update(int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]))
    return frozenset(ids)


def context_length(model: Any, tokenizer: Any, max_model_len: int | None) -> int:
    """``max_model_len`` if set, else the model's ``max_position_embeddings`` (capped at 8192)."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 2048
    if max_model_len is None:
        return int(min(limit, 8192))
    if max_model_len < 2:
        raise ConfigError(f"engine.max_model_len={max_model_len} must be at least 2.")
    if max_model_len > limit:
        raise ConfigError(
            f"engine.max_model_len={max_model_len} exceeds the model's max_position_embeddings={limit}."
        )
    return int(max_model_len)


def save_for_server(model: Any, tokenizer: Any, directory: str | None = None) -> str:
    """Save model and tokenizer with ``save_pretrained`` (to a fresh temporary folder by default)."""
    out = Path(directory or tempfile.mkdtemp(prefix="toolbox-engine-"))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def copy_weights_(model: Any, state_dict: dict[str, Any]) -> None:
    """Copy ``state_dict`` into ``model``'s tensors in place (a subset is fine).

    A ``module.`` (DDP) or ``_orig_mod.`` (``torch.compile``) prefix is stripped; an unknown name or a
    wrong shape raises before anything is written.
    """
    import torch

    own = model.state_dict()
    pairs = []
    for key, value in state_dict.items():
        name = key
        for prefix in ("module.", "_orig_mod."):
            name = name.removeprefix(prefix)
        if name not in own:
            raise KeyError(f"update_weights: the model has no parameter {key!r}")
        if tuple(own[name].shape) != tuple(value.shape):
            raise ValueError(
                f"update_weights: {key!r} has shape {tuple(value.shape)}, the model's is {tuple(own[name].shape)}"
            )
        pairs.append((own[name], value))
    with torch.no_grad():
        for target, value in pairs:
            target.copy_(value.detach())
