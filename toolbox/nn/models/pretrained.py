"""``pretrained``: load a saved causal language model with ``AutoModelForCausalLM``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from torch import nn

from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS


@MODELS.register("pretrained")
def pretrained(
    path: str,
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32",
    quantization: Literal["4bit", "8bit"] | None = None,
    max_position_embeddings: int | None = None,
) -> nn.Module:
    """A causal LM loaded by ``transformers.AutoModelForCausalLM.from_pretrained``.

    Loads from a local directory written by ``save_pretrained`` (for example a run's
    ``results/<run>/model``) or, with network access, from a Hugging Face Hub id.

    Args:
        path: a local directory holding ``config.json`` and the weights, or a hub model id.
        dtype: dtype of the loaded weights; ``auto`` keeps the dtype they were saved in.
        quantization: null, 4bit (NF4, computing in ``dtype``: bfloat16 where ``dtype`` is
            float32 on a GPU) or 8bit: load the weights quantized with bitsandbytes, for QLoRA
            (``peft=qlora``); on the GPU when CUDA is present, else on the CPU (bitsandbytes >= 0.48).
        max_position_embeddings: extend the model's context to this many positions (null: the
            saved config's). Rotary position embeddings of the default type have no weights and
            no table sized by the context, so the weights load unchanged and the model (and an
            engine or evaluator that reads ``config.max_position_embeddings``) takes longer
            sequences; positions past the saved context were never trained on. Only for a model
            with default RoPE; it may not shrink the saved context.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from toolbox.nn.models.saved import load_saved_model

    own = load_saved_model(path)  # a folder our own models (gnn) wrote: config.json names the model
    if own is not None:
        _refuse_context(max_position_embeddings, path, "one of toolbox's own models")
        return own
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    from toolbox.nn.adapters import holds_adapter, load_adapted

    if holds_adapter(path):  # a peft adapter folder: its base plus the adapter, merged
        _refuse_context(max_position_embeddings, path, "a peft adapter")
        return load_adapted(path, dtype=torch_dtype)
    extra: dict = {}
    if max_position_embeddings is not None:
        extra["max_position_embeddings"] = _longer_context(path, max_position_embeddings)
    if quantization is not None:
        from transformers import BitsAndBytesConfig

        from toolbox.nn.adapters import check_quantization_available

        check_quantization_available(quantization)
        cuda = torch.cuda.is_available()
        compute = torch.bfloat16 if cuda and dtype in ("float32", "auto") else torch_dtype
        extra["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=quantization == "4bit",
            load_in_8bit=quantization == "8bit",
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=compute if compute != "auto" else torch.bfloat16,
        )
        extra["device_map"] = {"": 0} if cuda else "cpu"
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **extra)
    except (OSError, ValueError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if Path(path).expanduser().is_dir():
            raise ConfigError(
                f"model.path={path!r}: could not load a causal language model from this directory "
                f"({reason}). It should hold config.json and the weights, as written by "
                f"save_pretrained."
            ) from e
        raise ConfigError(
            f"model.path={path!r} is not a local directory, and loading it from the Hugging Face Hub "
            f"failed ({reason}). Without network access (or with HF_HUB_OFFLINE=1) point model.path "
            f"at a local directory holding a saved model (config.json and weights, as written by "
            f"save_pretrained)."
        ) from e
    if quantization is not None:
        _keep_cpu_4bit_weights(model)
    return model


def _refuse_context(max_position_embeddings: int | None, path: str, what: str) -> None:
    if max_position_embeddings is not None:
        raise ConfigError(
            f"model.max_position_embeddings={max_position_embeddings}: model.path={path!r} holds {what}, "
            "whose context is not extended here; remove model.max_position_embeddings."
        )


def _longer_context(path: str, positions: int) -> int:
    """``positions`` checked against the saved config: at least its context, default RoPE."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError):
        return positions  # from_pretrained below fails with the message naming model.path
    saved = getattr(config, "max_position_embeddings", None)
    if saved is None:
        raise ConfigError(
            f"model.max_position_embeddings={positions}: the model at {path!r} ({config.model_type}) has no "
            "max_position_embeddings in its config to extend; remove model.max_position_embeddings."
        )
    if positions < saved:
        raise ConfigError(
            f"model.max_position_embeddings={positions} is below the saved model's {saved}: it extends "
            f"the context, it does not shrink it; set it to {saved} or more, or remove it."
        )
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type != "default":
        raise ConfigError(
            f"model.max_position_embeddings={positions}: the model at {path!r} uses RoPE of type "
            f"{rope_type!r}, whose frequencies depend on the context; remove model.max_position_embeddings "
            "(only default RoPE is extended)."
        )
    return positions


def _keep_cpu_4bit_weights(model: nn.Module) -> None:
    """Turn off bitsandbytes' CPU inference repacking of 4-bit weights: on a CPU with AVX512-BF16
    its first no-grad eval forward rewrites each layer's weights into a packed layout with bfloat16
    block scales, a lossy change (logits move by ~1e-3) that would make the frozen base differ
    between a run that evaluated and one that did not, and break bitwise resume."""
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
