"""What the paired and the unpaired preference trainers share: the checks of the collator, the
loader over the trainer's own copies of the examples, the frozen reference (per batch or
precomputed once) and its lean forward, the micro-batch loop, evaluation and the loader's state.

Each mode is its own trainer with its own ``train_step``: :class:`~toolbox.trainer.preference.PreferenceTrainer`
(chosen/rejected pairs: DPO and kin, Bradley–Terry) and
:class:`~toolbox.trainer.unpaired_preference.UnpairedPreferenceTrainer` (KTO on labelled examples).
A mode fills in four public hooks: ``check_data``, ``inputs`` (what the objective scores),
``reference_fields`` (what a precomputed reference adds to an example) and ``preference_metrics``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Literal

import torch

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registry import registered_name
from toolbox.data.collators.preference import PreferenceCollator
from toolbox.data.collators.preference_packed import PackedPreferenceCollator
from toolbox.data.collators.unpaired_preference import UnpairedPreferenceCollator
from toolbox.data.loader import BatchLoader
from toolbox.nn.adapters import AdapterDisabledReference
from toolbox.nn.llama_training import training_forward
from toolbox.objectives.base import LossOutput, PreferenceObjective
from toolbox.objectives.logprobs import completion_logps
from toolbox.objectives.preference import PreferenceLogps
from toolbox.trainer.base import BaseTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


class PreferenceTrainerBase(BaseTrainer):
    """The shared part of the preference trainers (see the module docstring); its settings are
    documented on :class:`~toolbox.trainer.preference.PreferenceTrainer`."""

    objective_family = PreferenceObjective
    uses_reference = True
    reference_key = "ref_chosen_logps"  # the field a precomputed reference adds to each example

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
        precompute_ref_logprobs: bool = False,
        reference_path: str | None = None,
        eval_batch_size: AtLeastOne = 64,
        max_eval_pairs: AtLeastOne | None = None,
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
                "data.collator.name=preference_pad (and data.dataset.name=preference_pairs), or for KTO on "
                "unpaired data data.collator.name=unpaired_preference_pad (and "
                "data.dataset.name=unpaired_preference)."
            )
        self.check_data(parts, batch_size)
        self.collator = parts.collator
        self.mismatched = self.objective.needs_kl_pairs  # KTO: batches carry the mismatched rows
        self.uses_scores = self.objective.inputs == "scores"
        if isinstance(parts.collator, PackedPreferenceCollator) and (self.uses_scores or self.mismatched):
            raise ConfigError(
                "data.collator.name=preference_packed packs the log-prob objectives' pairs only (not a "
                "reward model's scores, nor KTO's mismatched rows); use data.collator.name=preference_pad."
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
            self.collate,
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

    # the hooks of a mode -----------------------------------------------------------------------
    @abstractmethod
    def check_data(self, parts: Components, batch_size: int) -> None:
        """Fail fast on data the objective or the collator cannot take (before any batch is drawn)."""

    @abstractmethod
    def inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """What the objective scores: the policy's sums (with grad) and the reference's (without)."""

    @abstractmethod
    def reference_fields(self, sums: torch.Tensor, i: int, n: int) -> dict[str, float]:
        """What a precomputed reference adds to example ``i`` of a chunk of ``n`` (``sums``: the
        reference's per-row completion sums of the chunk's rows)."""

    @abstractmethod
    def preference_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out loss, accuracy, margin and the objective's metrics over ``examples``."""

    # the reference ------------------------------------------------------------------------------
    def setup(self) -> None:
        if self.reference is not None and self.precompute_ref_logprobs:
            for examples in (self.train_examples, self.eval_examples):
                self.precompute(examples)
            if not self.mismatched:  # KTO's mismatched rows change per batch: keep it for them
                self.reference = self._reference_forward = None  # every example carries its log-probs
                self.parts.release_reference()

    def collate(self, examples: list[dict[str, Any]], mismatched: bool | None = None) -> dict[str, Any]:
        return self.collator(examples, mismatched=self.mismatched if mismatched is None else mismatched)

    @torch.no_grad()
    def precompute(self, examples: list[dict[str, Any]]) -> None:
        """Replace each example of ``examples`` (a list of the trainer's) by a copy carrying its
        reference log-probs (``reference_fields``)."""
        if all(self.reference_key in ex for ex in examples):
            return
        with self.precision.autocast():
            for start in range(0, len(examples), self.eval_batch_size):
                chunk = examples[start : start + self.eval_batch_size]
                batch = self.to_device(self.collate(chunk, False))
                sums, _ = completion_logps(self._reference_forward, batch)
                for i, ex in enumerate(chunk):
                    examples[start + i] = {**ex, **self.reference_fields(sums, i, len(chunk))}

    def reference_logps(self, batch: dict[str, Any], first_row: int = 0) -> torch.Tensor:
        """The reference model's per-row completion sums (no grad) of the batch's rows from
        ``first_row`` on."""
        if self.reference is None:
            raise RuntimeError("the reference log-probs of this batch were not precomputed")
        rows = batch
        if first_row:
            rows = {k: batch[k][first_row:] for k in ("input_ids", "attention_mask", "completion_mask")}
        # inference mode: no view or version tracking for a forward nothing differentiates (the same
        # kernels, so the same sums); the clone is a plain tensor the loss may save for backward
        with torch.inference_mode():
            sums = completion_logps(self._reference_forward, rows)[0]
        return sums.clone()

    # one step -----------------------------------------------------------------------------------
    def to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        device = self.strategy.device
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    def accumulate(self) -> tuple[float, int, int, list[dict[str, float]]]:
        """``grad_accum_steps`` micro-batches: forward, objective, backward. Returns the summed loss,
        the items it is over, the tokens seen and each micro-batch's metrics."""
        if not self.model.training:  # a no-op walk over every module otherwise
            self.model.train()
        loss_total, items, tokens = 0.0, 0, 0
        micro: list[dict[str, float]] = []
        for _ in range(self.grad_accum_steps):
            batch = self.to_device(self.loader.next_batch())
            with self.precision.autocast():
                out = self.objective(self.inputs(self._forward, batch))
            self.backward(out.loss_sum)
            loss_total += out.loss_sum.item()
            items += out.num_items
            tokens += int(batch.get("num_tokens", batch["attention_mask"].sum()))  # packed: no 2D mask
            micro.append(out.metrics)
        return loss_total, items, tokens, micro

    def held_out(self, model: Any, examples: list[dict[str, Any]]) -> list[tuple[LossOutput, dict[str, Any]]]:
        """The objective's output on each chunk of ``eval_batch_size`` examples, with its batch."""
        outs = []
        for start in range(0, len(examples), self.eval_batch_size):
            batch = self.to_device(self.collate(examples[start : start + self.eval_batch_size]))
            with self.precision.autocast():
                outs.append((self.objective(self.inputs(model, batch)), batch))
        return outs

    # evaluation ---------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        metrics = super().evaluate()
        with self.eval_mode() as model, torch.random.fork_rng(devices=[]), torch.no_grad():
            metrics.update(self.preference_metrics(model, self.eval_examples))
        return metrics

    def evaluates_at_end(self) -> bool:
        return True  # evaluate() adds the held-out preference metrics, evaluators or not

    # checkpoints --------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
