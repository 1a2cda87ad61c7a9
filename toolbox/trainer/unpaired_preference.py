"""KTO on unpaired examples (``data.dataset.name=unpaired_preference``,
``data.collator.name=unpaired_preference_pad``: TRL's ``{prompt, completion, label}`` records), for
``objective=kto`` only, as TRL's KTOTrainer does: per micro-batch of ``B`` examples one forward over
``2B`` rows (the examples, then the mismatched rows prompt i + completion i−1 that estimate the KL
reference point z₀), the desirable mask from the labels, and TRL's metrics: ``kl``,
``rewards/chosen`` / ``logps/chosen`` over the desirable examples, ``rewards/rejected`` /
``logps/rejected`` over the undesirable ones, ``rewards/margins``, ``count/chosen`` /
``count/rejected``, and ``accuracy`` (the fraction of examples whose log-ratio lies on their label's
side of z₀). Means over micro-batches (and, in evaluation, over held-out chunks) are weighted by the
examples each mean is over. With ``precompute_ref_logprobs`` each example's reference log-prob is
computed once (the reference stays for the mismatched rows).

``trainer=preference`` builds this trainer when the collator is unpaired (same settings).
One step's files, in order: ``data/loader.py`` → ``data/collators/unpaired_preference.py`` →
``nn/llama_training.py`` → ``objectives/logprobs.py`` → ``objectives/kto.py`` →
``trainer/preference_base.py`` → ``trainer/base.py``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registry import registered_name
from toolbox.objectives.kto import merge_unpaired_metrics
from toolbox.objectives.logprobs import completion_logps
from toolbox.objectives.preference import PreferenceLogps
from toolbox.trainer.preference_base import PreferenceTrainerBase

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


class UnpairedPreferenceTrainer(PreferenceTrainerBase):
    """KTO over shuffled batches of unpaired, labelled examples (``trainer=preference`` with the
    ``unpaired_preference`` collator); the settings are the preference trainer's, ``batch_size``
    counting examples."""

    reference_key = "ref_logps"
    _registry_name = "preference"  # selected by trainer=preference: its errors name what the config says

    def check_data(self, parts: Components, batch_size: int) -> None:
        objective = registered_name(self.objective)
        first = parts.train_data[0] if len(parts.train_data) else {}
        if not self.objective.unpaired:
            raise ConfigError(
                f"objective: '{objective}' needs chosen/rejected pairs, but the data are unpaired "
                "(data.collator.name=unpaired_preference_pad); on unpaired {prompt, completion, label} "
                "data use objective=kto, or give paired data (data.dataset.name=preference_pairs, "
                "data.collator.name=preference_pad)."
            )
        if first and "label" not in first:
            raise ConfigError(
                "data.collator: 'unpaired_preference_pad' needs unpaired examples with a label; set "
                "data.dataset.name=unpaired_preference (or data.collator.name=preference_pad for pairs)."
            )
        if self.objective.needs_kl_pairs and batch_size < 2:
            raise ConfigError(
                f"trainer.batch_size: {batch_size}; KTO estimates its KL reference point from the other "
                "examples of a batch (prompt i with completion i-1), so set 2 or more."
            )
        self.objective.check_examples(parts.train_data)

    def reference_fields(self, sums: torch.Tensor, i: int, n: int) -> dict[str, float]:
        return {"ref_logps": float(sums[i])}

    def inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """Per-example sums under the policy and the reference, the labels, and the mismatched
        rows' sums (KL reference point) when the batch has them."""
        n = batch["num_examples"]
        sums, lengths = completion_logps(model, batch)
        x = PreferenceLogps(logps=sums[:n], lengths=lengths[:n], desirable=batch["label"].bool())
        if sums.shape[0] > n:
            x.kl_logps = sums[n:].detach()
        if "ref_logps" in batch:  # precomputed: only the mismatched rows need the reference
            x.ref_logps = batch["ref_logps"]
            if sums.shape[0] > n:
                x.ref_kl_logps = self.reference_logps(batch, n)
            return x
        ref = self.reference_logps(batch)
        x.ref_logps = ref[:n]
        if ref.shape[0] > n:
            x.ref_kl_logps = ref[n:]
        return x

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        loss_total, items, tokens, micro = self.accumulate()
        sums = merge_unpaired_metrics(micro)  # means over desirable / undesirable examples, by counts
        step = self.optimizer_step(loss_total, items)
        return {
            "loss": step["loss"],
            **sums,
            "accuracy": sums.get("rewards/label_accuracy", 0.0),
            "margin": sums.get("rewards/margins", 0.0),
            "lr": step["lr"],
            "grad_norm": step["grad_norm"],
            "num_tokens": tokens,
            "epoch": self.loader.epoch,
            "step_time": time.perf_counter() - start,
        }

    def preference_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out KTO metrics, in chunks of ``eval_batch_size`` (each chunk's mismatched rows give
        its z₀): ``eval/loss`` (mean per example), ``eval/kl``, the reward and log-prob means of the
        desirable (``eval/rewards/chosen``) and undesirable (``eval/rewards/rejected``) examples,
        ``eval/margin`` (their difference), the counts, and ``eval/accuracy``: the fraction of
        examples on their label's side of the reference point."""
        if not examples:
            return {}
        loss_sum, items, chunks = 0.0, 0, []
        for out, _ in self.held_out(model, examples):
            loss_sum += float(out.loss_sum)
            items += out.num_items
            chunks.append(out.metrics)
        metrics = {f"eval/{k}": v for k, v in merge_unpaired_metrics(chunks).items()}
        metrics["eval/loss"] = loss_sum / max(items, 1)
        metrics["eval/accuracy"] = metrics.get("eval/rewards/label_accuracy", 0.0)
        if "eval/rewards/margins" in metrics:
            metrics["eval/margin"] = metrics["eval/rewards/margins"]
        return metrics
