"""Numeric precision: fp32, or bf16/fp16 autocast where the device supports it."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import PRECISIONS


class Precision:
    """``autocast()`` wraps forward passes; ``scaler`` (fp16 on CUDA) scales the loss."""

    name = "fp32"
    dtype: torch.dtype | None = None

    def __init__(self, device: str = "cpu") -> None:
        self.device_type = torch.device(device).type
        self.scaler: Any = None

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


@PRECISIONS.register("fp32")
class FP32(Precision):
    """Full float32: no autocast."""


@PRECISIONS.register("bf16")
class BF16(Precision):
    """bfloat16 autocast over float32 master weights (CPU and Ampere+ GPUs)."""

    name = "bf16"
    dtype = torch.bfloat16

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        if self.device_type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("precision=bf16: this GPU has no bfloat16 support; use precision=fp16 or fp32.")


@PRECISIONS.register("fp16")
class FP16(Precision):
    """float16 autocast with a dynamic loss scaler (CUDA only)."""

    name = "fp16"
    dtype = torch.float16

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        if self.device_type != "cuda":
            raise ConfigError("precision=fp16 needs a CUDA device; on CPU use precision=bf16 or fp32.")
        self.scaler = torch.amp.GradScaler("cuda")
