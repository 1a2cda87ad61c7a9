"""The preference trainer: DPO and kin (and Bradley–Terry reward models) on chosen/rejected pairs,
and KTO on unpaired examples.

Each step, per micro-batch of ``B`` pairs (the ``preference`` collator's concatenated batch):

1. one forward of the policy over all ``2B`` rows (chosen rows, then rejected rows; ``3B`` for KTO's
   mismatched pairs) gives per-token log-probs, summed over each completion;
2. the frozen reference's sums come from the batch (``precompute_ref_logprobs=true``: computed
   once over the data set before training, then the reference is freed) or from one forward of the
   reference without grad; objectives that need no reference (SimPO, ORPO) skip it;
3. the objective turns them into a loss; gradients of all micro-batches are summed and divided
   by the pair count (so accumulation equals one large batch), clipped, stepped.

The reference is a frozen copy of the policy as built (before any resume, so a resumed run gets
the same reference: the builder's model is seeded, or loaded from ``model.path``), or the model at
``reference_path``. Evaluation adds ``eval/accuracy`` (the fraction of held-out pairs whose chosen
completion gets the higher implicit reward), ``eval/margin``, ``eval/loss`` and the reward means.

Unpaired data (``data.dataset.name=unpaired_preference``, ``data.collator.name=unpaired_preference``:
TRL's ``{prompt, completion, label}`` records) trains ``objective=kto`` only, as TRL's KTOTrainer
does: per micro-batch of ``B`` examples one forward over ``2B`` rows (the examples, then the
mismatched rows prompt i + completion i−1 that estimate the KL reference point z₀), the desirable
mask from the labels, and TRL's metrics: ``kl``, ``rewards/chosen`` / ``logps/chosen`` over the
desirable examples, ``rewards/rejected`` / ``logps/rejected`` over the undesirable ones,
``rewards/margins``, ``count/chosen`` / ``count/rejected``, and ``accuracy`` (the fraction of examples
whose log-ratio lies on their label's side of z₀). Means over micro-batches (and, in evaluation, over
held-out chunks) are weighted by the examples each mean is over. With ``precompute_ref_logprobs``
each example's reference log-prob is computed once; the reference stays for the mismatched rows,
which change with each shuffled batch.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.core.registry import registered_name
from toolbox.data.collators.preference import PreferenceCollator
from toolbox.data.collators.preference_packed import PackedPreferenceCollator
from toolbox.data.collators.unpaired_preference import UnpairedPreferenceCollator
from toolbox.data.loader import BatchLoader
from toolbox.nn.adapters import AdapterDisabledReference
from toolbox.nn.llama_training import training_forward
from toolbox.objectives.base import PreferenceObjective
from toolbox.objectives.kto import merge_unpaired_metrics
from toolbox.objectives.logprobs import completion_logps
from toolbox.objectives.preference import PreferenceLogps
from toolbox.trainer.base import BaseTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@TRAINERS.register("preference")
class PreferenceTrainer(BaseTrainer):
    """Optimises a preference objective (dpo, ipo, hinge, robust_dpo, simpo, orpo, kto,
    bradley_terry) over shuffled batches of preference pairs, or kto over unpaired examples.

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

    objective_family = PreferenceObjective
    uses_reference = True

    def __init__(
        self,
        parts: Components,
        max_steps: int = 100,
        batch_size: int = 8,
        grad_accum_steps: int = 1,
        max_grad_norm: float = 1.0,
        eval_every: int = 0,
        save_every: int = 0,
        shuffle: bool = True,
        precompute_ref_logprobs: bool = False,
        reference_path: str | None = None,
        eval_batch_size: int = 64,
        max_eval_pairs: int | None = None,
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
        pairs = PreferenceCollator | PackedPreferenceCollator
        if not isinstance(parts.collator, pairs | UnpairedPreferenceCollator):
            name = registered_name(parts.collator)
            raise ConfigError(
                f"data.collator: '{name}' cannot batch preference pairs; the preference trainer needs "
                "data.collator.name=preference (and data.dataset.name=preference), or for KTO on "
                "unpaired data data.collator.name=unpaired_preference (and "
                "data.dataset.name=unpaired_preference)."
            )
        self.unpaired = isinstance(parts.collator, UnpairedPreferenceCollator)
        self._check_data(parts, batch_size)
        self.collator = parts.collator
        self.mismatched = self.objective.needs_kl_pairs  # KTO: batches carry the mismatched rows
        self.uses_scores = self.objective.inputs == "scores"
        if isinstance(parts.collator, PackedPreferenceCollator) and (self.uses_scores or self.mismatched):
            raise ConfigError(
                "data.collator.name=preference_packed packs the log-prob objectives' pairs only (not a "
                "reward model's scores, nor KTO's mismatched rows); use data.collator.name=preference."
            )
        self.needs_reference = self.objective.needs_reference and not self.uses_scores
        self.grad_accum_steps = grad_accum_steps
        self.precompute_ref_logprobs = precompute_ref_logprobs
        self.eval_batch_size = eval_batch_size
        self.max_eval_pairs = max_eval_pairs
        # the trainer's own lists of the examples: precomputed reference log-probs go into copies of
        # the records here, never into the data set's records
        self.train_examples = list(parts.train_data)
        data = parts.eval_data
        self.eval_examples = list(data[:max_eval_pairs]) if max_eval_pairs else list(data)
        ctx = self.context
        self.loader = BatchLoader(
            self.train_examples,
            batch_size,
            self._collate,
            seed=ctx.seed,
            shuffle=shuffle,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        self.reference = parts.reference_model if self.needs_reference else None
        if self.needs_reference and self.reference is None:
            raise ConfigError(
                "the preference trainer needs parts.reference_model; build it with ExperimentBuilder."
            )
        # what computes the policy's (and a frozen reference's) log-probs: the lean forward where one
        # covers the model, else the model; checkpoints always save the model
        lean = forward != "model" and not self.uses_scores
        self._forward = (
            training_forward(self.model, exact=forward == "exact") if lean else None
        ) or self.model
        self._reference_forward = self.reference
        if isinstance(self.reference, AdapterDisabledReference) and self._forward is not self.model:
            self._reference_forward = AdapterDisabledReference(self.model, forward=self._forward)
        elif self.reference is not None and lean:
            self._reference_forward = (
                training_forward(self.reference, exact=forward == "exact") or self.reference
            )

    def _check_data(self, parts: Components, batch_size: int) -> None:
        """Fail fast on data the objective or the collator cannot take (before any batch is drawn)."""
        objective = registered_name(self.objective)
        first = parts.train_data[0] if len(parts.train_data) else {}
        if self.unpaired:
            if not self.objective.unpaired:
                raise ConfigError(
                    f"objective: '{objective}' needs chosen/rejected pairs, but the data are unpaired "
                    "(data.collator.name=unpaired_preference); on unpaired {prompt, completion, label} "
                    "data use objective=kto, or give paired data (data.dataset.name=preference, "
                    "data.collator.name=preference)."
                )
            if first and "label" not in first:
                raise ConfigError(
                    "data.collator: 'unpaired_preference' needs unpaired examples with a label; set "
                    "data.dataset.name=unpaired_preference (or data.collator.name=preference for pairs)."
                )
            if self.objective.needs_kl_pairs and batch_size < 2:
                raise ConfigError(
                    f"trainer.batch_size: {batch_size}; KTO estimates its KL reference point from the other "
                    "examples of a batch (prompt i with completion i-1), so set 2 or more."
                )
            self.objective.check_examples(parts.train_data)
        elif first and "chosen_ids" not in first and "label" in first:
            raise ConfigError(
                "data.collator: 'preference' batches chosen/rejected pairs, but the examples are unpaired "
                "(data.dataset.name=unpaired_preference); set data.collator.name=unpaired_preference."
            )

    # the reference ------------------------------------------------------------------------------
    def setup(self) -> None:
        if self.reference is not None and self.precompute_ref_logprobs:
            for examples in (self.train_examples, self.eval_examples):
                self._precompute(examples)
            if not self.mismatched:  # KTO's mismatched rows change per batch: keep it for them
                self.reference = self._reference_forward = (
                    None  # every pair carries its reference log-probs now
                )
                self.parts.release_reference()

    def _collate(self, examples: list[dict[str, Any]], mismatched: bool | None = None) -> dict[str, Any]:
        return self.collator(examples, mismatched=self.mismatched if mismatched is None else mismatched)

    @torch.no_grad()
    def _precompute(self, examples: list[dict[str, Any]]) -> None:
        """Replace each example of ``examples`` (a list of the trainer's) by a copy carrying its
        reference log-probs."""
        if all(("ref_logps" if self.unpaired else "ref_chosen_logps") in ex for ex in examples):
            return
        with self.precision.autocast():
            for start in range(0, len(examples), self.eval_batch_size):
                chunk = examples[start : start + self.eval_batch_size]
                sums, _ = completion_logps(
                    self._reference_forward, self._to_device(self._collate(chunk, False))
                )
                n = len(chunk)
                for i, ex in enumerate(chunk):
                    if self.unpaired:
                        examples[start + i] = {**ex, "ref_logps": float(sums[i])}
                        continue
                    examples[start + i] = {
                        **ex,
                        "ref_chosen_logps": float(sums[i]),
                        "ref_rejected_logps": float(sums[n + i]),
                    }

    # one step -----------------------------------------------------------------------------------
    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        device = self.strategy.device
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    def _reference_logps(self, batch: dict[str, Any], first_row: int = 0) -> torch.Tensor:
        """The reference model's per-row completion sums (no grad) of the batch's rows from
        ``first_row`` on."""
        if self.reference is None:
            raise RuntimeError("the reference log-probs of this batch were not precomputed")
        rows = batch
        if first_row:
            rows = {k: batch[k][first_row:] for k in ("input_ids", "attention_mask", "completion_mask")}
        with torch.no_grad():
            return completion_logps(self._reference_forward, rows)[0]

    def _unpaired_inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """Unpaired examples: per-example sums under the policy and the reference, the labels, and
        the mismatched rows' sums (KL reference point) when the batch has them."""
        n = batch["num_examples"]
        sums, lengths = completion_logps(model, batch)
        x = PreferenceLogps(logps=sums[:n], lengths=lengths[:n], desirable=batch["label"].bool())
        if sums.shape[0] > n:
            x.kl_logps = sums[n:].detach()
        if "ref_logps" in batch:  # precomputed: only the mismatched rows need the reference
            x.ref_logps = batch["ref_logps"]
            if sums.shape[0] > n:
                x.ref_kl_logps = self._reference_logps(batch, n)
            return x
        ref = self._reference_logps(batch)
        x.ref_logps = ref[:n]
        if ref.shape[0] > n:
            x.ref_kl_logps = ref[n:]
        return x

    def _inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """What the objective scores: the policy's sums (with grad) and the reference's (without)."""
        if "label" in batch:
            return self._unpaired_inputs(model, batch)
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
                x.ref_kl_logps = self._reference_logps(batch, 2 * n)
            return x
        ref = self._reference_logps(batch)
        x.ref_chosen_logps, x.ref_rejected_logps = ref[:n], ref[n : 2 * n]
        if ref.shape[0] > 2 * n:
            x.ref_kl_logps = ref[2 * n :]
        return x

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        if not self.model.training:  # a no-op walk over every module otherwise
            self.model.train()
        loss_total, items, tokens = 0.0, 0, 0
        sums: dict[str, float] = {}
        micro: list[dict[str, float]] = []  # each micro-batch's metrics
        for _ in range(self.grad_accum_steps):
            batch = self._to_device(self.loader.next_batch())
            with self.precision.autocast():
                out = self.objective(self._inputs(self._forward, batch))
            self.backward(out.loss_sum)
            loss_total += out.loss_sum.item()
            items += out.num_items
            tokens += int(batch.get("num_tokens", batch["attention_mask"].sum()))  # packed: no 2D mask
            micro.append(out.metrics)
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v / self.grad_accum_steps
        if self.unpaired:  # means over desirable / undesirable examples, weighted by their counts
            sums = merge_unpaired_metrics(micro)
        step = self.optimizer_step(loss_total, items)
        return {
            "loss": step["loss"],
            **sums,
            "accuracy": sums.get("rewards/label_accuracy" if self.unpaired else "rewards/accuracies", 0.0),
            "margin": sums.get("rewards/margins", 0.0),
            "lr": step["lr"],
            "grad_norm": step["grad_norm"],
            "num_tokens": tokens,
            "epoch": self.loader.epoch,
            "step_time": time.perf_counter() - start,
        }

    # evaluation ---------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        metrics = super().evaluate()
        with self.eval_mode() as model, torch.random.fork_rng(devices=[]), torch.no_grad():
            metrics.update(self.preference_metrics(model, self.eval_examples))
        return metrics

    def _finish(self) -> dict[str, float]:
        if not self.evaluators:  # the base skeleton evaluates at the end only when evaluators are configured
            self._evaluate()
        return super()._finish()

    def preference_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out loss, accuracy, margin and reward means, weighted by pairs (unpaired data: see
        :meth:`unpaired_metrics`)."""
        if not examples:
            return {}
        if self.unpaired:
            return self.unpaired_metrics(model, examples)
        totals: dict[str, float] = {}
        loss_sum, items, pairs = 0.0, 0, 0
        for start in range(0, len(examples), self.eval_batch_size):
            batch = self._to_device(self._collate(examples[start : start + self.eval_batch_size]))
            n = batch["num_pairs"]
            with self.precision.autocast():
                out = self.objective(self._inputs(model, batch))
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

    def unpaired_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out KTO metrics on unpaired examples, in chunks of ``eval_batch_size`` (each chunk's
        mismatched rows give its z₀): ``eval/loss`` (mean per example), ``eval/kl``, the reward and
        log-prob means of the desirable (``eval/rewards/chosen``) and undesirable
        (``eval/rewards/rejected``) examples, ``eval/margin`` (their difference), the counts, and
        ``eval/accuracy``: the fraction of examples on their label's side of the reference point."""
        loss_sum, items, chunks = 0.0, 0, []
        for start in range(0, len(examples), self.eval_batch_size):
            batch = self._to_device(self._collate(examples[start : start + self.eval_batch_size]))
            with self.precision.autocast():
                out = self.objective(self._inputs(model, batch))
            loss_sum += float(out.loss_sum)
            items += out.num_items
            chunks.append(out.metrics)
        metrics = {f"eval/{k}": v for k, v in merge_unpaired_metrics(chunks).items()}
        metrics["eval/loss"] = loss_sum / max(items, 1)
        metrics["eval/accuracy"] = metrics.get("eval/rewards/label_accuracy", 0.0)
        if "eval/rewards/margins" in metrics:
            metrics["eval/margin"] = metrics["eval/rewards/margins"]
        return metrics

    # checkpoints --------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
