"""The preference trainer: DPO and kin (and Bradley–Terry reward models) on chosen/rejected pairs.

Each step, per micro-batch of ``B`` pairs (the ``preference`` collator's concatenated batch):

1. one forward of the policy over all ``2B`` rows (chosen rows, then rejected rows; ``3B`` for KTO's
   mismatched pairs) gives per-token log-probs, summed over each completion;
2. the frozen reference's sums come from the batch (``precompute_ref_logprobs=true``: computed
   once over the data set before training, then the reference is freed) or from one forward of the
   reference without grad; objectives that need no reference (SimPO, ORPO) skip it;
3. the objective turns them into a loss; gradients of all micro-batches are summed and divided
   by the pair count (so accumulation equals one large batch), clipped, stepped.
Files, in order: ``data/loader.py`` → ``data/collators/preference.py`` → ``nn/llama_training.py``
→ ``objectives/logprobs.py`` → ``objectives/preference.py`` (``dpo_family.py``, ``kto.py``) →
``trainer/preference_base.py`` → ``trainer/base.py``.

The reference is a frozen copy of the policy as built (before any resume, so a resumed run gets
the same reference: the builder's model is seeded, or loaded from ``model.path``), or the model at
``reference_path``. Evaluation adds ``eval/accuracy`` (the fraction of held-out pairs whose chosen
completion gets the higher implicit reward), ``eval/margin``, ``eval/loss`` and the reward means.

Unpaired data (``data.collator.name=unpaired_preference_pad``: KTO on ``{prompt, completion, label}``
records) train in :class:`~toolbox.trainer.unpaired_preference.UnpairedPreferenceTrainer`, with its
own step: ``trainer=preference`` builds it when the collator is unpaired. What both share (the
reference, the loader, the micro-batch loop, evaluation) is ``trainer/preference_base.py``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.core.registry import registered_name
from toolbox.data.collators.unpaired_preference import UnpairedPreferenceCollator
from toolbox.objectives.logprobs import completion_logps
from toolbox.objectives.preference import PreferenceLogps
from toolbox.trainer.preference_base import PreferenceTrainerBase
from toolbox.trainer.unpaired_preference import UnpairedPreferenceTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components
    from toolbox.trainer.base import BaseTrainer


@TRAINERS.register("preference")
class PreferenceTrainer(PreferenceTrainerBase):
    """Optimises a preference objective (dpo, ipo, hinge, robust_dpo, simpo, orpo, kto,
    bradley_terry) over shuffled batches of preference pairs; with an unpaired collator it builds
    :class:`~toolbox.trainer.unpaired_preference.UnpairedPreferenceTrainer` (kto on labelled examples).

    Args:
        max_steps: optimizer steps to train for.
        batch_size: pairs (unpaired data: examples) per micro-batch (per process).
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        activation_checkpointing: recompute each layer's activations in the backward pass instead
            of storing them (Hugging Face models): less memory for about one more forward.
        eval_every: evaluate every this many steps (0: only at the end).
        save_every: save a checkpoint every this many steps (0: only at the end).
        shuffle: visit the pairs in a seeded random order each epoch.
        precompute_ref_logprobs: score every pair under the reference once before training (then
            free the reference); otherwise the reference runs on each batch, without grad.
        reference_path: a saved causal LM to use as the reference (null: a frozen copy of the
            policy as built).
        eval_batch_size: pairs per forward pass when evaluating.
        max_eval_pairs: evaluate on the first this many held-out pairs (null: all).
        forward: how a Hugging Face Llama-layout policy (and a frozen reference) computes its
            log-probs: ``lean`` (the lean training forward, logits only at completion tokens),
            ``exact`` (the lean forward in transformers' op order: bitwise the model's numbers) or
            ``model`` (the model's own forward); see ``trainer=supervised``.
    """

    @classmethod
    def from_builder(cls, parts: Components, **settings: Any) -> BaseTrainer:
        """Pairs train here; unpaired examples (the ``unpaired_preference`` collator) in
        :class:`UnpairedPreferenceTrainer`, the same settings."""
        if cls is PreferenceTrainer and isinstance(parts.collator, UnpairedPreferenceCollator):
            return UnpairedPreferenceTrainer.from_builder(parts, **settings)
        return super().from_builder(parts, **settings)

    def check_data(self, parts: Components, batch_size: int) -> None:
        first = parts.train_data[0] if len(parts.train_data) else {}
        if isinstance(parts.collator, UnpairedPreferenceCollator):
            raise ConfigError(
                f"data.collator: trainer '{registered_name(type(self))}' trains on chosen/rejected pairs, "
                "not unpaired examples; use trainer=preference (KTO) or data.collator.name=preference_pad."
            )
        if first and "chosen_ids" not in first and "label" in first:
            raise ConfigError(
                "data.collator: 'preference_pad' batches chosen/rejected pairs, but the examples are unpaired "
                "(data.dataset.name=unpaired_preference); set data.collator.name=unpaired_preference_pad."
            )

    def reference_fields(self, sums: torch.Tensor, i: int, n: int) -> dict[str, float]:
        return {"ref_chosen_logps": float(sums[i]), "ref_rejected_logps": float(sums[n + i])}

    def inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """The chosen and rejected rows' sums (reward models: scores), then KTO's mismatched rows."""
        n = batch["num_pairs"]
        if self.uses_scores:
            scores = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]
            return PreferenceLogps(
                chosen_scores=scores[:n], rejected_scores=scores[n : 2 * n], margin=batch.get("margin")
            )
        sums, lengths = completion_logps(model, batch)
        x = PreferenceLogps(
            chosen_logps=sums[:n],
            rejected_logps=sums[n : 2 * n],
            chosen_lengths=lengths[:n],
            rejected_lengths=lengths[n : 2 * n],
        )
        if sums.shape[0] > 2 * n:
            x.kl_logps = sums[2 * n :].detach()
        if not self.needs_reference:
            return x
        if "ref_chosen_logps" in batch:  # precomputed
            x.ref_chosen_logps, x.ref_rejected_logps = batch["ref_chosen_logps"], batch["ref_rejected_logps"]
            if sums.shape[0] > 2 * n:  # only the mismatched rows need the reference
                x.ref_kl_logps = self.reference_logps(batch, 2 * n)
            return x
        ref = self.reference_logps(batch)
        x.ref_chosen_logps, x.ref_rejected_logps = ref[:n], ref[n : 2 * n]
        if ref.shape[0] > 2 * n:
            x.ref_kl_logps = ref[2 * n :]
        return x

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        loss_total, items, tokens, micro = self.accumulate()
        sums: dict[str, float] = {}
        for metrics in micro:
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v / self.grad_accum_steps
        step = self.optimizer_step(loss_total, items)
        return {
            "loss": step["loss"],
            **sums,
            "accuracy": sums.get("rewards/accuracies", 0.0),
            "margin": sums.get("rewards/margins", 0.0),
            "lr": step["lr"],
            "grad_norm": step["grad_norm"],
            "num_tokens": tokens,
            "epoch": self.loader.epoch,
            "step_time": time.perf_counter() - start,
        }

    def preference_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out loss, accuracy, margin and reward means, weighted by pairs."""
        if not examples:
            return {}
        totals: dict[str, float] = {}
        loss_sum, items, pairs = 0.0, 0, 0
        for out, batch in self.held_out(model, examples):
            n = batch["num_pairs"]
            loss_sum += float(out.loss_sum)
            items += out.num_items
            pairs += n
            for k, v in out.metrics.items():
                totals[k] = totals.get(k, 0.0) + v * n
        metrics = {f"eval/{k}": v / pairs for k, v in totals.items()}
        metrics["eval/loss"] = loss_sum / max(items, 1)
        metrics["eval/accuracy"] = metrics.get("eval/rewards/accuracies", 0.0)
        metrics["eval/margin"] = metrics.get("eval/rewards/margins", 0.0)
        return metrics
