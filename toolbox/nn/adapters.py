"""Parameter-efficient fine-tuning through ``peft``: LoRA, DoRA and QLoRA adapters on any causal LM.

``toolbox train experiment=dpo_arith peft=lora`` (or ``peft=dora``, ``peft=qlora``) wraps the
built model in a ``peft.PeftModel`` before the optimizer is built, so the optimizer, precision,
strategy and trainer see only the adapter's parameters as trainable. What changes with an adapter:

- the reference of the preference and policy losses is the same model with its adapters disabled
  (:class:`AdapterDisabledReference`, as TRL does), not a second copy of the weights;
- checkpoints hold only the adapter's tensors (the base is rebuilt from the config, seeded or from
  ``model.path``, exactly as at the start), and resume is bitwise;
- the exported run holds ``adapter/`` (peft's own format) and ``model/``: the merged model
  (``merge_on_export=true``, default, so eval, serving and ``init_from`` need nothing new) or the
  adapter alone (``merge_on_export=false``; the base must then come from ``model.path``);
- the engines serve a merged folder as any model, and a folder holding an adapter as base +
  adapter (the torch engine merges it, the HF engine keeps the adapter, vLLM gets a LoRA request).

QLoRA (``quantize=4bit`` or ``8bit``) needs ``bitsandbytes`` (0.48 or later runs its 4-bit and
8-bit layers on the CPU too; earlier versions need a CUDA GPU); without it the run fails before
anything is built, naming what is missing. A quantized base is merged in the precision it was
trained against: its weights dequantized, the adapter's update added, saved as plain float weights
(:func:`merged_state_dict`), so the exported model computes what the adapted one did and every
engine serves it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from toolbox.core.errors import ConfigError
from toolbox.core.registries import ADAPTERS
from toolbox.nn.export import export_pretrained

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"


def is_adapted(model: Any) -> bool:
    """Whether ``model`` (or the module a DDP wrapper holds) is a peft model."""
    model = getattr(model, "module", model)
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def holds_adapter(path: str | Path) -> bool:
    """Whether a folder holds a peft adapter (``adapter_config.json``) rather than a full model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


@ADAPTERS.register("lora")
class LoRA:
    """A LoRA adapter (DoRA with ``use_dora``, QLoRA with ``quantize``) through ``peft``.

    Args:
        r: rank of the update matrices.
        alpha: scaling numerator; the update is scaled by ``alpha / r``.
        dropout: dropout on the adapter's input while training.
        target_modules: module names (or suffixes) to adapt; ``all-linear`` adapts every linear
            layer except the output head (peft's shortcut).
        modules_to_save: modules trained in full and saved with the adapter (e.g. ``[lm_head]``).
        use_dora: weight-decomposed LoRA (DoRA, Liu et al. 2024).
        bias: which biases to train: none, all or lora_only.
        quantize: null, 4bit or 8bit: load the frozen base quantized (QLoRA; bitsandbytes).
        merge_on_export: write the merged model to ``<run>/model`` (true) or only the adapter (false).
    """

    def __init__(
        self,
        r: int = 8,
        alpha: float = 16.0,
        dropout: float = 0.0,
        target_modules: str | Sequence[str] = "all-linear",
        modules_to_save: Sequence[str] | None = None,
        use_dora: bool = False,
        bias: Literal["none", "all", "lora_only"] = "none",
        quantize: Literal["4bit", "8bit"] | None = None,
        merge_on_export: bool = True,
    ) -> None:
        if r < 1:
            raise ConfigError(f"peft.r: {r}; the rank must be at least 1 (8 or 16 are usual).")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"peft.dropout: {dropout}; set a probability in [0, 1).")
        if quantize not in (None, "4bit", "8bit"):
            raise ConfigError(f"peft.quantize: {quantize!r}; choose null, 4bit or 8bit.")
        if quantize is not None:
            check_quantization_available(quantize)
        self.r = r
        self.alpha = alpha
        self.dropout = dropout
        self.target_modules = target_modules if isinstance(target_modules, str) else list(target_modules)
        self.modules_to_save = list(modules_to_save) if modules_to_save else None
        self.use_dora = use_dora
        self.bias = bias
        self.quantize = quantize
        self.merge_on_export = merge_on_export

    def peft_config(self) -> Any:
        from peft import LoraConfig, TaskType

        return LoraConfig(
            task_type=TaskType.CAUSAL_LM,
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules,
            modules_to_save=self.modules_to_save,
            use_dora=self.use_dora,
            bias=self.bias,
        )

    def apply(self, model: nn.Module) -> nn.Module:
        """``model`` wrapped in a ``PeftModel`` with this adapter; only the adapter trains."""
        from peft import get_peft_model

        if is_adapted(model):
            raise ConfigError("peft: the model already carries an adapter; load the merged model instead.")
        if self.quantize is not None:
            from peft import prepare_model_for_kbit_training

            bits = {"4bit": "is_loaded_in_4bit", "8bit": "is_loaded_in_8bit"}[self.quantize]
            if not getattr(model, bits, False):
                raise ConfigError(
                    f"peft.quantize={self.quantize}: the base must be loaded quantized; set "
                    f"model=pretrained model.path=DIR model.quantization={self.quantize}."
                )
            model = prepare_model_for_kbit_training(model)
        try:
            adapted = get_peft_model(model, self.peft_config())
        except ValueError as e:  # e.g. target modules that the model lacks
            raise ConfigError(f"peft: {e}".splitlines()[0] + " (set peft.target_modules)") from e
        trainable, total = count_parameters(adapted)
        message = (
            f"peft {'dora' if self.use_dora else 'lora'} r={self.r}: {trainable:,} trainable of {total:,} "
            f"parameters ({100 * trainable / max(total, 1):.2f} %)"
        )
        log.info(message)
        print(message, flush=True)
        return adapted


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def check_quantization_available(quantize: str) -> None:
    """QLoRA needs bitsandbytes, and a CUDA device where its version has no CPU layers: say which is
    missing, before anything is built."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(
            f"peft.quantize={quantize} (QLoRA) needs the bitsandbytes package (pip install "
            "'bitsandbytes>=0.48'); without it train LoRA on the unquantized model (peft=lora)."
        )
    version = importlib.metadata.version("bitsandbytes")
    if not torch.cuda.is_available() and _version_tuple(version) < (0, 48):
        raise ConfigError(
            f"peft.quantize={quantize} (QLoRA): bitsandbytes {version} has no CPU layers and this "
            "machine has no CUDA GPU; pip install 'bitsandbytes>=0.48' (CPU support), or train "
            "LoRA on the unquantized model (peft=lora)."
        )


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def is_quantized(model: nn.Module) -> bool:
    """Whether the (adapted) model's base was loaded quantized by bitsandbytes."""
    model = getattr(model, "module", model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False))


def adapter_state_dict(model: nn.Module, full_state: dict[str, Any]) -> dict[str, Any]:
    """The tensors of ``full_state`` that the adapter trains or saves (what a checkpoint keeps)."""
    model = getattr(model, "module", model)
    keep = {name for name, p in model.named_parameters() if p.requires_grad}
    keep |= {k for k in full_state if "lora_" in k or "modules_to_save" in k}
    return {k: v for k, v in full_state.items() if k in keep}


def with_base_weights(model: nn.Module, adapter_state: dict[str, Any]) -> dict[str, Any]:
    """A full state dict: the model's own (base) tensors, with the checkpoint's adapter tensors."""
    # a quantized base's state dict carries its quantization statistics, which load_state_dict
    # refuses as unexpected: they stay as loaded (the base is frozen), only its tensors go back
    full = {k: v for k, v in getattr(model, "module", model).state_dict().items() if not _is_quant_state(k)}
    unknown = sorted(set(adapter_state) - set(full))
    if unknown:
        raise ConfigError(
            f"resume: the checkpoint's adapter has tensors this model lacks ({unknown[0]}, ...); "
            "resume with the peft settings the run was trained with."
        )
    full.update(adapter_state)
    return full


class AdapterDisabledReference(nn.Module):
    """The frozen reference of an adapted policy: the policy itself with its adapters disabled.

    Called like a model; runs under ``no_grad`` and in eval mode (no dropout), then restores the
    policy's mode. It holds the policy without registering it, so it adds no parameters, no state
    and no memory.
    """

    def __init__(self, policy: nn.Module, forward: Any = None) -> None:
        super().__init__()
        self.__dict__["policy"] = policy  # not a submodule: nothing to save, move or count
        self.__dict__["inner"] = forward or policy  # what computes the logits (a lean forward, or it)

    @property
    def config(self) -> Any:
        return self.policy.config

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """The policy with its adapters off, in eval mode and without grad, for the ``with`` block."""
        policy = getattr(self.policy, "module", self.policy)
        was_training = policy.training
        policy.eval()
        try:
            with torch.no_grad(), policy.disable_adapter():
                yield
        finally:
            policy.train(was_training)

    def lean_base(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> Any:
        """The lean training forward reading the base alone for these inputs (what :meth:`disabled`
        would give, without walking every layer to switch modes and adapter flags), or ``None``
        where there is none (then use :meth:`disabled` and ``inner``)."""
        without = getattr(self.inner, "without_adapters", None)
        base = without() if without is not None else None
        return base if base is not None and base.covers(input_ids, attention_mask, position_ids) else None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.disabled():
            return self.inner(*args, **kwargs)


def merged_copy(model: nn.Module) -> nn.Module:
    """A plain model with the adapter merged into the base weights (the adapted model is untouched);
    a quantized base comes back dequantized, in float32."""
    model = getattr(model, "module", model)
    if not is_quantized(model):
        return copy.deepcopy(model).merge_and_unload()
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.get_base_model().config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attr):
            delattr(config, attr)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(merged_state_dict(model), strict=True)
    return plain


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The base model's state dict with the adapter's update merged in, computed without a copy:
    merge, read, unmerge (what an engine serving the policy needs after each update). For a
    quantized base: its weights dequantized plus the adapter's update (peft's own merge would
    quantize the sum again), in float32."""
    model = getattr(model, "module", model)
    if is_quantized(model):
        return _dequantized_merged_state(model)
    with torch.no_grad():
        model.merge_adapter()
        try:
            base = model.get_base_model()
            state = {}
            for name, tensor in base.state_dict().items():
                if "lora_" in name or "modules_to_save" in name:
                    continue
                state[_plain_name(name)] = tensor.detach().clone()
        finally:
            model.unmerge_adapter()
    return state


def _plain_name(name: str) -> str:
    return name.replace(".base_layer", "").replace(".original_module", "")


def _dequantized_merged_state(model: nn.Module) -> dict[str, torch.Tensor]:
    import bitsandbytes as bnb
    from peft.tuners.lora import LoraLayer
    from peft.utils.integrations import dequantize_bnb_weight

    base = model.get_base_model()
    state: dict[str, torch.Tensor] = {}
    quantized: set[str] = set()
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)):
                key = _plain_name(name)
                state[f"{key}.weight"] = dequantize_bnb_weight(
                    module.weight, getattr(module, "state", None)
                ).float()
                if module.bias is not None:
                    state[f"{key}.bias"] = module.bias.detach().float().clone()
                quantized.add(name)
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer):
                key = f"{_plain_name(name)}.weight"
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        state[key] = state[key] + module.get_delta_weight(adapter).float()
        for name, tensor in base.state_dict().items():
            key = _plain_name(name)
            owner = name.rsplit(".", 1)[0]
            if "lora_" in name or "modules_to_save" in name or key in state:
                continue
            if owner in quantized or owner.replace(".weight", "") in quantized or _is_quant_state(name):
                continue
            state[key] = tensor.detach().float().clone()
    return state


def _is_quant_state(name: str) -> bool:
    return any(
        tag in name for tag in (".absmax", ".quant_map", ".quant_state", ".nested_", ".SCB", ".weight_format")
    )


def export_adapted(model: nn.Module, tokenizer: Any, run_dir: Path, export_dir: str, merge: bool) -> None:
    """Write ``<run>/adapter`` (peft format) and ``<run>/<export_dir>`` (merged, or the adapter)."""
    model = getattr(model, "module", model)
    export_pretrained(model, tokenizer, run_dir / "adapter")
    if merge:
        export_pretrained(merged_copy(model), tokenizer, run_dir / export_dir)
    else:
        base = getattr(model.peft_config["default"], "base_model_name_or_path", None)
        if not base or not Path(base).is_dir():
            raise ConfigError(
                "peft.merge_on_export=false writes only the adapter, whose base must be a saved model "
                f"(model=pretrained model.path=DIR); this run's base is {base or 'built from config'}. "
                "Set peft.merge_on_export=true."
            )
        export_pretrained(model, tokenizer, run_dir / export_dir)


def load_adapted(path: str | Path, dtype: Any = torch.float32, merge: bool = True) -> nn.Module:
    """A model from a folder holding a peft adapter: its base (``base_model_name_or_path``) plus the
    adapter, merged into plain weights (``merge``) or kept as a ``PeftModel``."""
    from peft import AutoPeftModelForCausalLM

    try:
        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{path}: holds an adapter whose base model could not be loaded ({str(e).splitlines()[0]}); "
            "point base_model_name_or_path in adapter_config.json at the base model's folder."
        ) from e
    return model.merge_and_unload() if merge else model
