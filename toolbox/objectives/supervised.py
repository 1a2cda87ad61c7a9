"""Supervised objectives: causal-LM cross entropy (optionally completion-only) and classification."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import LossOutput, SupervisedObjective

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


@OBJECTIVES.register("causal_lm")
class CausalLMLoss(SupervisedObjective):
    """Next-token cross entropy of a causal LM.

    Args:
        completion_only: score only the tokens the batch's ``completion_mask`` marks (the answer,
            not the prompt); when false every non-padding token is scored.
        label_smoothing: mass moved uniformly over the vocabulary (0 = plain cross entropy).
        vocab_chunk: score this many tokens at a time from the model's last hidden states and its
            output layer (``toolbox.objectives.chunked_ce``), so the full float32 logits of a large
            vocabulary never exist; null: the model's logits. Needs a transformers causal LM (a
            ``.model`` body and a bias-free output layer) and no label smoothing or loss weights.

    A batch with ``loss_weights`` (per token, float; the chat dataset's ``last_turn_weight``)
    multiplies each scored token's cross entropy by its weight; the sum is still divided by the
    number of scored tokens (``num_items``, which token accuracy shares), so a weight w on every
    token multiplies the loss by w, and weights of 1.0 give the unweighted loss.
    """

    accuracy_name = "token_accuracy"

    def __init__(
        self, completion_only: bool = True, label_smoothing: float = 0.0, vocab_chunk: int | None = None
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError("objective.label_smoothing must be in [0, 1)")
        if vocab_chunk is not None and (vocab_chunk < 1 or label_smoothing):
            raise ValueError(
                f"objective.vocab_chunk={vocab_chunk}: set a positive number of tokens, without "
                "label_smoothing (or vocab_chunk=null)"
            )
        self.completion_only = completion_only
        self.label_smoothing = label_smoothing
        self.vocab_chunk = vocab_chunk

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        inputs = {k: batch[k] for k in MODEL_INPUTS if k in batch}
        attention = batch.get("attention_mask")
        padding = attention if attention is not None and attention.dim() == 2 else None  # 4-D: packed rows
        if padding is not None and "position_ids" not in inputs and _right_padded(padding):
            # causal attention never looks right, so right padding changes no scored logit: dropping
            # the mask lets attention take its fused causal path (same result, faster)
            del inputs["attention_mask"]
        if self.completion_only:
            mask = batch["completion_mask"]
        else:
            mask = padding if padding is not None else torch.ones_like(batch["input_ids"])
        labels = batch["input_ids"][:, 1:]
        scored = mask[:, 1:].bool()
        if padding is not None:
            scored = scored & padding[:, 1:].bool()
        if self.vocab_chunk is not None:
            return self._chunked(model, inputs, labels, scored, batch.get("loss_weights"))
        if getattr(model, "accepts_logits_mask", False):
            # a training forward (toolbox.nn.llama_training) that computes only the logits we score
            logits = model(**inputs, logits_mask=F.pad(scored, (0, 1))).logits
        else:
            logits = model(**inputs).logits[:, :-1][scored]
        targets = labels[scored]
        weights = batch.get("loss_weights")
        weights = None if weights is None else weights[:, 1:][scored].float()
        if weights is None or bool((weights == 1.0).all()):  # unweighted: the plain sum, bit for bit
            loss_sum = F.cross_entropy(
                logits.float(), targets, reduction="sum", label_smoothing=self.label_smoothing
            )
        else:
            per_token = F.cross_entropy(
                logits.float(), targets, reduction="none", label_smoothing=self.label_smoothing
            )
            loss_sum = (per_token * weights).sum()
        n = int(targets.numel())
        with torch.no_grad():
            acc = (logits.argmax(-1) == targets).float().sum().item()
        return LossOutput(loss_sum, n, {"correct": acc})

    def _chunked(self, model: Any, inputs: dict, labels, scored, weights) -> LossOutput:
        from toolbox.objectives.chunked_ce import chunked_cross_entropy

        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if head is None or getattr(head, "bias", None) is not None or not hasattr(model, "model"):
            raise ValueError(
                f"objective.vocab_chunk: {type(model).__name__} is no transformers causal LM with a "
                "bias-free output layer; set objective.vocab_chunk=null."
            )
        if weights is not None and not bool((weights[:, 1:][scored] == 1.0).all()):
            raise ValueError("objective.vocab_chunk does not weight tokens (loss_weights); set it to null.")
        hidden = model.model(**inputs).last_hidden_state[:, :-1][scored]
        targets = labels[scored]
        loss_sum = chunked_cross_entropy(hidden, head.weight, targets, self.vocab_chunk)
        with torch.no_grad():
            correct = sum(
                ((h @ head.weight.T).argmax(-1) == t).sum().item()
                for h, t in zip(hidden.split(self.vocab_chunk), targets.split(self.vocab_chunk), strict=True)
            )
        return LossOutput(loss_sum, int(targets.numel()), {"correct": float(correct)})


@OBJECTIVES.register("classification")
class ClassificationLoss(SupervisedObjective):
    """Cross entropy of class logits ``model(batch["x"])`` against ``batch["y"]``.

    Args:
        label_smoothing: mass moved uniformly over the classes (0 = plain cross entropy).
        input_key: batch key of the model input.
        target_key: batch key of the integer class labels.
    """

    accuracy_name = "accuracy"

    def __init__(self, label_smoothing: float = 0.0, input_key: str = "x", target_key: str = "y") -> None:
        self.label_smoothing = label_smoothing
        self.input_key = input_key
        self.target_key = target_key

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        out = model(batch[self.input_key])
        logits = out.logits if hasattr(out, "logits") else out
        y = batch[self.target_key]
        loss_sum = F.cross_entropy(logits.float(), y, reduction="sum", label_smoothing=self.label_smoothing)
        with torch.no_grad():
            acc = (logits.argmax(-1) == y).float().sum().item()
        return LossOutput(loss_sum, int(y.numel()), {"correct": acc})


def _right_padded(mask: torch.Tensor) -> bool:
    """True when every row is ones then zeros (padding only at the end)."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all())
