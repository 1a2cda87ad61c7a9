"""``trl_sft``: TRL's ``SFTTrainer`` run from the same config and data as the ``supervised`` trainer.

Switch a run with ``trainer=trl_sft`` to compare. The model, tokenizer, data (the source's raw
prompt/completion text, which TRL tokenizes itself with the loss on the completion only; a record
with only ``text`` trains on all of it), our optimizer and scheduler (``optimizers=``), batch size,
accumulation, steps and gradient clipping are the same. On CPU: ``bf16=False``,
``activation_checkpointing=False``, ``use_cpu=True``, ``report_to="none"``. TRL's per-step logs
become our STEP_END events; evaluation, the final checkpoint and the ``model/`` export are ours.
Resuming (``resume_from``) is not supported.

One step, the files it crosses in order: ``trainer/trl/sft.py`` (``_trl_trainer``: the raw rows
and the ``SFTConfig``, once) → ``trainer/trl/bridge.py`` (``run_trl_loop`` hands the loop to TRL) →
TRL's ``trl/trainer/sft_trainer.py`` (``DataCollatorForLanguageModeling`` pads the batch,
``compute_loss``: the completion-only cross entropy) → transformers' ``trainer.py``
(``training_step``: backward; then clip, our optimizer's and scheduler's step) →
``trainer/trl/bridge.py`` (``on_log``: TRL's numbers as our STEP_END) → ``trainer/callbacks/``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.core.registry import registered_name
from toolbox.data.datasets.tokenized import TokenizedFactory
from toolbox.trainer.base import BaseTrainer
from toolbox.trainer.supervised import SupervisedTrainer
from toolbox.trainer.trl.bridge import event_bridge, refuse_resume, run_trl_loop

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@TRAINERS.register("trl_sft")
class TRLSFTTrainer(SupervisedTrainer):
    """TRL's SFTTrainer on our model, data, optimizer and scheduler (see the module docstring).

    Args:
        max_steps: optimizer steps to train for.
        batch_size: examples per micro-batch (per process).
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the global gradient norm to this.
        eval_every: run our evaluators every this many steps (0: only at the end).
        save_every: unused by TRL's loop (only the final checkpoint is written); kept for config parity.
        shuffle: unused (TRL shuffles with the run's seed).
        max_length: TRL's max_length (null: data.dataset.max_length).
        completion_only_loss: train on the completion tokens only (prompt/completion records).
    """

    @classmethod
    def from_builder(cls, parts: Any, **settings: Any) -> BaseTrainer:
        refuse_resume(parts, "trl_sft", "supervised")
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
        max_length: AtLeastOne | None = None,
        completion_only_loss: bool = True,
    ) -> None:
        super().__init__(
            parts,
            max_steps=max_steps,
            batch_size=batch_size,
            grad_accum_steps=grad_accum_steps,
            max_grad_norm=max_grad_norm,
            eval_every=eval_every,
            save_every=save_every,
            shuffle=shuffle,
        )
        self.batch_size = batch_size
        if not isinstance(parts.dataset, TokenizedFactory):
            raise ConfigError(
                f"data.dataset: trainer=trl_sft trains a causal LM on text; '{registered_name(parts.dataset)}' "
                "makes no token sequences (use data.dataset.name=prompt_completion or lm_text)."
            )
        self.max_length = max_length or parts.dataset.max_length
        self.completion_only_loss = completion_only_loss

    def train_step(self) -> dict[str, float]:  # pragma: no cover - TRL runs the loop
        raise NotImplementedError("trl_sft trains inside TRL's SFTTrainer; call fit()")

    def _rows(self) -> list[dict[str, str]]:
        records = self.parts.splits.train
        if all("prompt" in r and "completion" in r for r in records):
            return [{"prompt": r["prompt"], "completion": r["completion"]} for r in records]
        if all("text" in r for r in records):
            return [{"text": r["text"]} for r in records]
        raise ConfigError("data.source: trainer=trl_sft needs records with prompt/completion or text fields.")

    def _trl_trainer(self) -> Any:
        import datasets
        from transformers import PrinterCallback
        from trl import SFTConfig
        from trl import SFTTrainer as TRLTrainer

        precision = type(self.precision).__name__.lower()
        out = Path(self.context.run_dir) / "trl" if self.context.run_dir else Path(tempfile.mkdtemp())
        config = SFTConfig(
            output_dir=str(out),
            per_device_train_batch_size=self.batch_size,
            gradient_accumulation_steps=self.grad_accum_steps,
            max_steps=self.max_steps,
            max_grad_norm=self.max_grad_norm,
            max_length=self.max_length,
            completion_only_loss=self.completion_only_loss,
            packing=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16="bf16" in precision,
            fp16="fp16" in precision,
            activation_checkpointing=False,
            use_cpu=str(self.strategy.device) == "cpu",
            dataloader_num_workers=0,
            seed=int(self.context.seed),
            disable_tqdm=True,
        )
        trainer = TRLTrainer(
            model=self.model,
            args=config,
            train_dataset=datasets.Dataset.from_list(self._rows()),
            processing_class=self.tokenizer,
            optimizers=(self.optimizer, self.scheduler),
            callbacks=[event_bridge(self)],
        )
        trainer.remove_callback(PrinterCallback)
        return trainer

    def run_loop(self) -> None:
        run_trl_loop(self)
