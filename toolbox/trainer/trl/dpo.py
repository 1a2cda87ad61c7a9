"""``trl_dpo``: TRL's ``DPOTrainer`` run from the same config and data as the ``preference`` trainer.

Switch a run with ``trainer=trl_dpo`` to compare: the model, tokenizer, pairs (the source's raw
prompt/chosen/rejected text, which TRL tokenizes itself), our configured optimizer and scheduler
(handed to TRL as ``optimizers=``), the objective's beta and loss, batch size, accumulation, steps and
gradient clipping are the same. TRL's per-step logs become our STEP_END events (so the console,
JSONL and W&B callbacks see them), and the held-out evaluation, checkpoint and FIT_END are ours.

Objectives TRL 1.16's DPOTrainer has: ``dpo`` (loss_type sigmoid; without label smoothing, which
TRL's sigmoid no longer takes), ``robust_dpo`` (robust), ``ipo``, ``hinge``. Resuming a TRL run
(``resume_from``) is not supported.

One step, the files it crosses in order: ``trainer/trl/dpo.py`` (``_trl_trainer``: the raw pairs
and the ``DPOConfig``, once) → ``trainer/trl/bridge.py`` (``run_trl_loop`` hands the loop to TRL) →
TRL's ``trl/trainer/dpo_trainer.py`` (``DataCollatorForPreference`` pads the pairs,
``_compute_loss``: the policy's and the reference's log-probs and the loss type) → transformers'
``trainer.py`` (``training_step``: backward; then clip, our optimizer's and scheduler's step) →
``trainer/trl/bridge.py`` (``on_log``: TRL's numbers as our STEP_END) → ``trainer/callbacks/``.
Held-out evaluation is ours: ``trainer/preference.py``'s ``preference_metrics``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.core.registry import registered_name
from toolbox.data.datasets.preference import Preference
from toolbox.objectives.preference import DPOLoss, HingeLoss, IPOLoss, RobustDPOLoss
from toolbox.trainer.base import BaseTrainer
from toolbox.trainer.preference import PreferenceTrainer
from toolbox.trainer.trl.bridge import event_bridge, refuse_resume, run_trl_loop

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


def trl_loss(objective: Any) -> tuple[str, float, float]:
    """(TRL loss_type, beta, label_smoothing) of one of our preference objectives."""
    if isinstance(objective, RobustDPOLoss):
        return "robust", objective.beta, objective.label_smoothing
    if isinstance(objective, DPOLoss):
        if objective.label_smoothing:
            raise ConfigError(
                "objective.label_smoothing: TRL 1.16's sigmoid DPO loss has no label smoothing; use "
                "objective=robust_dpo with trainer=trl_dpo, or trainer=preference for cDPO."
            )
        return "sigmoid", objective.beta, 0.0
    if isinstance(objective, IPOLoss):
        return "ipo", objective.beta, 0.0
    if isinstance(objective, HingeLoss):
        return "hinge", objective.beta, 0.0
    name = registered_name(objective)
    raise ConfigError(
        f"objective: '{name}' has no TRL DPOTrainer counterpart; with trainer=trl_dpo choose dpo, "
        "robust_dpo, ipo or hinge (or use trainer=preference)."
    )


@TRAINERS.register("trl_dpo")
class TRLDPOTrainer(PreferenceTrainer):
    """TRL's DPOTrainer on our model, data, optimizer and scheduler (see the module docstring).

    Args:
        max_steps: optimizer steps to train for.
        batch_size: pairs per micro-batch (per process).
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the global gradient norm to this.
        eval_every: evaluate (our held-out preference metrics) every this many steps (0: only at the end).
        save_every: unused by TRL's loop (only the final checkpoint is written); kept for config parity.
        shuffle: unused (TRL shuffles with the run's seed).
        precompute_ref_logprobs: TRL's precompute_ref_log_probs.
        reference_path: a saved causal LM to use as the reference (null: a frozen copy of the policy).
        eval_batch_size: pairs per forward pass when evaluating.
        max_eval_pairs: evaluate on the first this many held-out pairs (null: all).
        max_length: TRL's max_length (prompt + completion tokens).
    """

    @classmethod
    def from_builder(cls, parts: Any, **settings: Any) -> BaseTrainer:
        refuse_resume(parts, "trl_dpo", "preference")
        return super().from_builder(parts, **settings)

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
        max_length: AtLeastOne | None = None,
    ) -> None:
        self.loss_type, self.beta, self.label_smoothing = trl_loss(parts.objective)
        super().__init__(
            parts,
            max_steps=max_steps,
            batch_size=batch_size,
            grad_accum_steps=grad_accum_steps,
            max_grad_norm=max_grad_norm,
            eval_every=eval_every,
            save_every=save_every,
            shuffle=shuffle,
            precompute_ref_logprobs=False,
            reference_path=reference_path,
            eval_batch_size=eval_batch_size,
            max_eval_pairs=max_eval_pairs,
        )
        self.trl_precompute = precompute_ref_logprobs
        self.batch_size = batch_size
        dataset = parts.dataset
        if not isinstance(dataset, Preference):
            raise ConfigError(
                f"data.dataset: trainer=trl_dpo reads the raw pairs of data.dataset.name=preference_pairs, not "
                f"'{registered_name(dataset)}'."
            )
        self.max_length = max_length or dataset.max_length
        self.fields = (dataset.prompt_field, dataset.chosen_field, dataset.rejected_field)

    def train_step(self) -> dict[str, float]:  # pragma: no cover - TRL runs the loop
        raise NotImplementedError("trl_dpo trains inside TRL's DPOTrainer; call fit()")

    def _trl_trainer(self) -> Any:
        import datasets
        from transformers import PrinterCallback
        from trl import DPOConfig
        from trl import DPOTrainer as TRLTrainer

        prompt, chosen, rejected = self.fields
        rows = [
            {"prompt": r[prompt], "chosen": r[chosen], "rejected": r[rejected]}
            for r in self.parts.splits.train
        ]

        precision = type(self.precision).__name__.lower()
        config = DPOConfig(
            output_dir=str(Path(self.context.run_dir) / "trl")
            if self.context.run_dir
            else tempfile.mkdtemp(),
            per_device_train_batch_size=self.batch_size,
            gradient_accumulation_steps=self.grad_accum_steps,
            max_steps=self.max_steps,
            max_grad_norm=self.max_grad_norm,
            beta=self.beta,
            loss_type=[self.loss_type],
            label_smoothing=self.label_smoothing,
            max_length=self.max_length,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16="bf16" in precision,
            fp16="fp16" in precision,
            gradient_checkpointing=False,
            dataloader_num_workers=0,
            seed=int(self.context.seed),
            disable_tqdm=True,
            precompute_ref_log_probs=self.trl_precompute,
        )
        trainer = TRLTrainer(
            model=self.model,
            ref_model=None if self.trl_precompute else self.reference,
            args=config,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=self.tokenizer,
            optimizers=(self.optimizer, self.scheduler),
            callbacks=[event_bridge(self, {"rewards/accuracies": "accuracy", "rewards/margins": "margin"})],
        )
        trainer.remove_callback(PrinterCallback)  # our callbacks log; TRL's printer would repeat every step
        return trainer

    def run_loop(self) -> None:
        run_trl_loop(self)
