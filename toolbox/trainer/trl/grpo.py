"""``trl_grpo``: TRL's ``GRPOTrainer`` run from the same config and data as the ``grpo`` trainer.

Switch a run with ``trainer=trl_grpo`` to compare. The model, tokenizer, prompts (the source's raw
prompt text plus every other record field, which TRL hands to the reward functions), our reward
components (wrapped as TRL reward functions with their weights and our error policy), our optimizer
and scheduler (``optimizers=``), and every GRPO setting are the same and passed explicitly:
generations per prompt, prompts per step (``per_device_train_batch_size`` = prompts × generations,
one optimizer step per generation batch when ``minibatch_size`` is null), completion length,
temperature / top_p / top_k, ``ppo_epochs`` (``num_iterations``), the objective's loss_type, clip
range, beta and importance-sampling level, the advantage scaling (group_norm's scale →
``scale_rewards``) and ``mask_truncated_completions``. On CPU: ``bf16=False``,
``activation_checkpointing=False``, ``use_cpu=True``, ``report_to="none"``, ``use_vllm=False``.
TRL's per-step logs become our STEP_END events; evaluation, the final checkpoint and the
``model/`` export are ours. Resuming (``resume_from``) is not supported.

One step, the files it crosses in order: ``trainer/trl/grpo.py`` (``trl_config`` and
``_trl_trainer``, once; ``trl_reward_funcs`` wraps our rewards) → ``trainer/trl/bridge.py``
(``run_trl_loop`` hands the loop to TRL) → TRL's ``trl/trainer/grpo_trainer.py``
(``_generate_and_score_completions``: generation with the model's ``generate``, then our reward
components through ``rewards/base.py``'s ``call_reward``, the group advantages; ``_compute_loss``:
the clipped objective) → transformers' ``trainer.py`` (``training_step``: backward; then clip, our
optimizer's and scheduler's step) → ``trainer/trl/bridge.py`` (``on_log``: TRL's numbers as our
STEP_END) → ``trainer/callbacks/``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.rewards.base import call_reward
from toolbox.rl.advantages import GroupNorm
from toolbox.trainer.grpo import GRPOTrainer
from toolbox.trainer.trl.bridge import event_bridge, refuse_resume, run_trl_loop


def trl_reward_funcs(reward: Any) -> list[Any]:
    """Our composite reward's components as TRL reward functions (named, with our error policy)."""
    funcs = []
    for name, fn in zip(reward.names, reward.fns, strict=True):

        def wrapped(prompts, completions, _fn=fn, _name=name, **kwargs):
            fields = {
                k: v
                for k, v in kwargs.items()
                if k not in ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
            }
            scores, failed = call_reward(_fn, prompts, completions, fields, reward.on_error, _name)
            if failed:
                reward.errors[_name] += 1
            return scores

        wrapped.__name__ = name
        funcs.append(wrapped)
    return funcs


@TRAINERS.register("trl_grpo")
class TRLGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer on our model, data, rewards, optimizer and scheduler (see the module docstring).

    Args: as the ``grpo`` trainer; ``micro_batch_size`` and ``seed_sampling`` are not used (TRL
    generates with ``model.generate`` and the run's seed), ``reference_path`` is not supported.
    """

    uses_engine = False  # TRL generates with the model's own generate()
    uses_reference = False  # TRL makes its own reference (a copy of the model)

    @classmethod
    def from_builder(cls, parts: Any, **settings: Any) -> TRLGRPOTrainer:
        refuse_resume(parts, "trl_grpo", "grpo")
        if settings.get("reference_path"):
            raise ConfigError(
                "trainer.reference_path: trainer=trl_grpo uses TRL's own reference (a copy of the model)."
            )
        return super().from_builder(parts, **settings)

    def train_step(self) -> dict[str, float]:  # pragma: no cover - TRL runs the loop
        raise NotImplementedError("trl_grpo trains inside TRL's GRPOTrainer; call fit()")

    def trl_config(self) -> Any:
        from trl import GRPOConfig

        obj = self.objective
        if isinstance(self.advantage, GroupNorm):
            scale = self.advantage.scale
        else:
            raise ConfigError(
                "trainer.advantage: trainer=trl_grpo supports group_norm (scale group/batch/none) only."
            )
        rows = self.prompts_per_step * self.num_generations
        precision = type(self.precision).__name__.lower()
        out = Path(self.context.run_dir) / "trl" if self.context.run_dir else Path(tempfile.mkdtemp())
        return GRPOConfig(
            output_dir=str(out),
            per_device_train_batch_size=self.minibatch_size,
            gradient_accumulation_steps=1,
            generation_batch_size=rows,
            num_generations=self.num_generations,
            max_completion_length=self.max_completion_length,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            num_iterations=self.ppo_epochs,
            loss_type=obj.loss_type,
            epsilon=obj.epsilon_low,
            epsilon_high=obj.epsilon_high,
            delta=obj.delta,
            importance_sampling_level=obj.importance_sampling_level,
            beta=obj.beta,
            scale_rewards=scale,
            reward_weights=list(self.reward.weights),
            mask_truncated_completions=self.mask_truncated,
            max_steps=self.max_steps * self.ppo_epochs * (rows // self.minibatch_size),
            max_grad_norm=self.max_grad_norm,
            use_vllm=False,
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
            log_completions=False,
            shuffle_dataset=True,
        )

    def _trl_trainer(self) -> Any:
        import datasets
        from transformers import PrinterCallback
        from trl import GRPOTrainer as TRLTrainer

        rows = [
            {k: v for k, v in r.items() if k != "prompt_ids" and not k.startswith("_")}
            for r in self.parts.train_data
        ]
        for r in rows:
            r["prompt"] = r.pop(self.prompt_field) if self.prompt_field != "prompt" else r["prompt"]

        if self.objective.beta > 0:  # TRL loads its reference from the model's path: give it one
            ref_dir = Path(tempfile.mkdtemp(prefix="trl_ref_"))
            self.policy.save_pretrained(ref_dir)
            self.policy.config._name_or_path = str(ref_dir)
        trainer = TRLTrainer(
            model=self.model,
            reward_funcs=trl_reward_funcs(self.reward),
            args=self.trl_config(),
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=self.tokenizer,
            optimizers=(self.optimizer, self.scheduler),
            callbacks=[event_bridge(self)],
        )
        trainer.remove_callback(PrinterCallback)
        return trainer

    def run_loop(self) -> None:
        run_trl_loop(self)

    def setup(self) -> None:
        pass
