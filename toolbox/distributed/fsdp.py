"""Fully sharded data parallel (FSDP2): parameters, gradients and optimizer state split over ranks.

``fully_shard`` wraps each transformer block, then the root module; a block's parameters are
gathered just before its forward/backward and freed after. On GPU with ``precision=bf16`` the
parameters are cast to bfloat16 for compute (a ``MixedPrecisionPolicy``) while gradients are
reduced in float32. On CPU the process group is gloo and the mesh ``init_device_mesh("cpu", ...)``.

Checkpoints: every rank writes its shards with torch.distributed.checkpoint into the checkpoint's
``sharded/`` folder; rank 0 writes the rest (step, scheduler, RNG, data position) and the manifest,
and commits the folder atomically. DCP reshards on load, so a run saved on 2 ranks resumes on 1 (under
``fsdp``, ``ddp`` or ``single``) and the reverse. The checkpoint callback exports one consolidated
model (``get_model_state_dict(full_state_dict=True, cpu_offload=True)``) that loads with
``from_pretrained`` in one process. FSDP1 is not used: on CPU it crashes (SIGSEGV) offloading a full
state dict.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from toolbox.core.checkpointer import SHARDED_DIR
from toolbox.core.context import RunContext
from toolbox.core.errors import ConfigError
from toolbox.core.registries import STRATEGIES
from toolbox.distributed.process_group import DistributedStrategy, broadcast_object

if TYPE_CHECKING:
    from toolbox.core.checkpointer import Checkpointer

PARAM_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def transformer_blocks(model: nn.Module, class_names: list[str] | None = None) -> list[nn.Module]:
    """The modules to shard one by one, outermost first.

    ``class_names`` (or else a Hugging Face model's ``_no_split_modules``, e.g. ``LlamaDecoderLayer``)
    selects modules by class name; without either, the entries of every ``nn.ModuleList`` are taken
    (the ``layers`` of ``transformer_lm``). A module inside an already selected one is skipped.
    """
    names = set(class_names or getattr(model, "_no_split_modules", None) or ())
    if names:
        found = [m for m in model.modules() if type(m).__name__ in names]
    else:
        found = [c for m in model.modules() if isinstance(m, nn.ModuleList) for c in m]
    chosen: list[nn.Module] = []
    inside: set[int] = set()
    for module in found:
        if id(module) in inside or not any(True for _ in module.parameters()):
            continue
        chosen.append(module)
        inside.update(id(m) for m in module.modules())
    return chosen


@STRATEGIES.register("fsdp")
class FSDP(DistributedStrategy):
    """FSDP2 ``fully_shard`` per transformer block, then the root (gloo on CPU, nccl on GPU).

    Args:
        backend: auto (nccl on CUDA, gloo on CPU), gloo or nccl.
        timeout_s: seconds a collective may wait for the other ranks before failing.
        mixed_precision: parameter dtype for compute on GPU: fp32, bf16 or fp16 (the config follows
            ``precision.name``); gradients are reduced in float32. Ignored on CPU.
        reshard_after_forward: free gathered parameters after each forward (less memory, one more
            all-gather in backward).
        block_classes: class names of the modules to shard one by one (empty: the model's
            ``_no_split_modules``, else the entries of every ModuleList).
    """

    #: the model's parameters are DTensor shards: exporting it needs a gather (a collective)
    shards_model = True

    def __init__(
        self,
        context: RunContext,
        backend: str = "auto",
        timeout_s: float = 1800.0,
        mixed_precision: str = "fp32",
        reshard_after_forward: bool = True,
        block_classes: list[str] | None = None,
    ) -> None:
        super().__init__(context, backend=backend, timeout_s=timeout_s)
        if mixed_precision not in PARAM_DTYPES:
            raise ConfigError(
                f"strategy.mixed_precision: unknown '{mixed_precision}'; use one of {', '.join(PARAM_DTYPES)}."
            )
        self.mixed_precision = mixed_precision
        self.reshard_after_forward = reshard_after_forward
        self.block_classes = list(block_classes or [])
        self.mesh = None

    def _mp_policy(self):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        dtype = PARAM_DTYPES[self.mixed_precision]
        if dtype is None or self.device.type != "cuda":
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    def prepare_model(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model = model.to(self.device)
        self.mesh = init_device_mesh(self.device.type, (self.context.world_size,))
        kwargs = {
            "mesh": self.mesh,
            "mp_policy": self._mp_policy(),
            "reshard_after_forward": self.reshard_after_forward,
        }
        blocks = transformer_blocks(model, self.block_classes)
        if self.block_classes and not blocks:
            raise ConfigError(
                f"strategy.block_classes: no module of class {self.block_classes} in the model."
            )
        for block in blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model  # FSDP2 shards in place: the model keeps its class and methods

    # state: keyed by parameter name, sharded ----------------------------------------------------
    def model_state_dict(self, model: nn.Module) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(model)

    def optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer)

    def load_model_state_dict(self, model: nn.Module, state: dict[str, Any]) -> None:
        """Load a full (unsharded) model state, as single and DDP checkpoints hold it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def load_optimizer_state_dict(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load a full optimizer state keyed by parameter index (single / DDP checkpoints)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(
            model,
            optimizer,
            _by_name(model, optimizer, state),
            options=StateDictOptions(full_state_dict=True),
        )

    def full_model_state_dict(self, model: nn.Module) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def save_checkpoint(self, checkpointer: Checkpointer, step: int, state: dict[str, Any]) -> Path | None:
        """Every rank writes its shards into ``sharded/``; rank 0 writes the rest and commits."""
        from toolbox.distributed.sharded import save_sharded

        sharded = {"model": state["model"], "optimizer": state["optimizer"]}
        rest = {k: v for k, v in state.items() if k not in sharded}
        rest["rng_ranks"] = self.all_gather_object(state["rng"])
        token = broadcast_object(os.getpid())  # every rank writes into rank 0's temp folder
        if self.context.is_main:
            checkpointer.begin(step, token)
        self.barrier()
        tmp = checkpointer.tmp_path(step, token)
        save_sharded(sharded, tmp / SHARDED_DIR)
        self.barrier()
        path = checkpointer.commit(step, tmp, rest) if self.context.is_main else None
        self.barrier()
        return path


def _by_name(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """``optimizer.state_dict()`` (parameters numbered in param-group order) keyed by parameter name."""
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {
        "state": {order[i]: v for i, v in state["state"].items()},
        "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]],
    }
