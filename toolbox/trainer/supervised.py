"""The supervised trainer: gradient-accumulated objective(model, batch); the base steps the optimizer.

One step, the files it crosses in order: ``data/loader.py`` (the next shuffled batch) →
``data/collators/`` (the run's collator pads it) → ``nn/llama_training.py`` (the lean forward of
a Hugging Face Llama-layout model; other models their own ``forward``) → ``objectives/supervised.py``
(the loss summed over items) → ``trainer/base.py`` (``backward``, ``optimizer_step``: normalise,
clip, step) → ``trainer/callbacks/`` (STEP_END: log, checkpoint).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

import torch

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt
from toolbox.core.registries import TRAINERS
from toolbox.data.loader import BatchLoader
from toolbox.nn.llama_training import training_forward
from toolbox.objectives.base import SupervisedObjective
from toolbox.trainer.base import BaseTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@TRAINERS.register("supervised")
class SupervisedTrainer(BaseTrainer):
    """Minimises a supervised objective over shuffled batches of the training set.

    The objective returns a loss summed over its items (tokens); gradients of all micro-batches of a
    step are summed and divided by the total item count, so ``grad_accum_steps=k`` with batch ``b``
    gives the same update as one batch of ``k*b``.

    Args:
        max_steps: optimizer steps to train for.
        batch_size: examples per micro-batch (per process).
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        activation_checkpointing: recompute each layer's activations in the backward pass instead
            of storing them (Hugging Face models): less memory for about one more forward.
        eval_every: run the evaluators every this many steps (0: only at the end).
        save_every: save a checkpoint every this many steps (0: only at the end).
        shuffle: visit the training set in a seeded random order each epoch.
        forward: how a Hugging Face Llama-layout model (Llama, Mistral, Qwen2, Qwen3) computes
            its training loss: ``lean`` (a leaner forward over the same weights that also skips
            the positions no loss reads; the same loss, and gradients equal up to float rounding),
            ``exact`` (leaner, with gradients bitwise those of transformers' forward) or ``model``
            (the model's own forward). Other models (Gemma, GPT-2, ...) always use their own
            forward.
    """

    objective_family = SupervisedObjective

    def __init__(
        self,
        parts: Components,
        max_steps: AtLeastOne = 100,
        batch_size: AtLeastOne = 8,
        grad_accum_steps: AtLeastOne = 1,
        max_grad_norm: NonNegativeFloat = 1.0,
        eval_every: NonNegativeInt = 0,
        save_every: NonNegativeInt = 0,
        shuffle: bool = True,
        forward: Literal["lean", "exact", "model"] = "lean",
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__(
            parts,
            max_steps=max_steps,
            eval_every=eval_every,
            save_every=save_every,
            max_grad_norm=max_grad_norm,
            activation_checkpointing=activation_checkpointing,
        )
        self.grad_accum_steps = grad_accum_steps
        ctx = self.context
        self.loader = BatchLoader(
            parts.train_data,
            batch_size,
            parts.collator,
            seed=ctx.seed,
            shuffle=shuffle,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        # what the objective calls: a leaner forward over the same weights where one covers the model
        # (an unwrapped HF Llama), else the model itself; checkpoints always save the model
        lean = training_forward(self.model, exact=forward == "exact") if forward != "model" else None
        self._forward = lean or self.model

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        if not self.model.training:  # a no-op walk over every module otherwise
            self.model.train()
        loss_total, items, correct, tokens = 0.0, 0, 0.0, 0
        device = self.strategy.device
        for _ in range(self.grad_accum_steps):
            batch = {
                k: v.to(device) if torch.is_tensor(v) else v for k, v in self.loader.next_batch().items()
            }
            with self.precision.autocast():
                out = self.objective(self._forward, batch)
            self.backward(out.loss_sum)
            loss_total += out.loss_sum.item()
            items += out.num_items
            correct += out.metrics.get("correct", 0.0)
            tokens += _num_tokens(batch, out.num_items)
        step = self.optimizer_step(loss_total, items)
        return {
            "loss": step["loss"],
            self.objective.accuracy_name: correct / max(items, 1),
            "lr": step["lr"],
            "grad_norm": step["grad_norm"],
            "num_tokens": tokens,
            "epoch": self.loader.epoch,
            "step_time": time.perf_counter() - start,
        }

    def extra_state(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])


def _num_tokens(batch: dict[str, Any], default: int) -> int:
    """Input tokens of a batch: non-padding ones from a 2-D mask; every position of packed rows."""
    mask = batch.get("attention_mask")
    if mask is None:
        return default
    return int(mask.sum()) if mask.dim() == 2 else int(batch["input_ids"].numel())
