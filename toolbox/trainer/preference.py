"""The preference trainer: DPO and kin (and Bradley–Terry reward models) on chosen/rejected pairs.

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
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TRAINERS
from toolbox.data.collators.preference import PreferenceCollator
from toolbox.data.loader import BatchLoader
from toolbox.objectives.base import PreferenceObjective
from toolbox.objectives.logprobs import selective_log_softmax
from toolbox.objectives.preference import PreferenceLogps
from toolbox.trainer.base import BaseTrainer

if TYPE_CHECKING:
    from toolbox.experiment import Components


def completion_logps(model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sums of the completion tokens' log-probs, and the completion lengths (``[R]`` each)."""
    ids, mask = batch["input_ids"], batch["completion_mask"]
    logits = model(input_ids=ids, attention_mask=batch["attention_mask"], use_cache=False).logits
    scored = mask[:, 1:].bool()
    per_token = torch.zeros(scored.shape, dtype=torch.float32, device=ids.device)
    per_token[scored] = selective_log_softmax(logits[:, :-1][scored], ids[:, 1:][scored])
    return per_token.sum(-1), scored.sum(-1).float()


@TRAINERS.register("preference")
class PreferenceTrainer(BaseTrainer):
    """Optimises a preference objective (dpo, ipo, hinge, robust_dpo, simpo, orpo, kto,
    bradley_terry) over shuffled batches of preference pairs.

    Args:
        max_steps: optimizer steps to train for.
        batch_size: pairs per micro-batch (per process).
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        eval_every: evaluate every this many steps (0: only at the end).
        save_every: save a checkpoint every this many steps (0: only at the end).
        shuffle: visit the pairs in a seeded random order each epoch.
        precompute_ref_logprobs: score every pair under the reference once before training (then
            free the reference); otherwise the reference runs on each batch, without grad.
        reference_path: a saved causal LM to use as the reference (null: a frozen copy of the
            policy as built).
        eval_batch_size: pairs per forward pass when evaluating.
        max_eval_pairs: evaluate on the first this many held-out pairs (null: all).
    """

    objective_family = PreferenceObjective

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
    ) -> None:
        super().__init__(parts, max_steps=max_steps, eval_every=eval_every, save_every=save_every)
        if not isinstance(parts.collator, PreferenceCollator):
            name = getattr(type(parts.collator), "_registry_name", type(parts.collator).__name__)
            raise ConfigError(
                f"data.collator: '{name}' cannot batch preference pairs; the preference trainer needs "
                "data.collator.name=preference (and data.dataset.name=preference)."
            )
        self.collator = parts.collator
        self.collator.mismatched = bool(getattr(self.objective, "needs_kl_pairs", False))
        self.uses_scores = getattr(self.objective, "inputs", "logps") == "scores"
        self.needs_reference = bool(getattr(self.objective, "needs_reference", True)) and not self.uses_scores
        self.grad_accum_steps = grad_accum_steps
        self.max_grad_norm = max_grad_norm
        self.precompute_ref_logprobs = precompute_ref_logprobs
        self.eval_batch_size = eval_batch_size
        self.max_eval_pairs = max_eval_pairs
        ctx = self.context
        self.loader = BatchLoader(
            parts.train_data,
            batch_size,
            self.collator,
            seed=ctx.seed,
            shuffle=shuffle,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.reference = self._build_reference(reference_path) if self.needs_reference else None

    # the reference ------------------------------------------------------------------------------
    def _build_reference(self, path: str | None) -> torch.nn.Module:
        if path:
            from transformers import AutoModelForCausalLM

            reference = AutoModelForCausalLM.from_pretrained(path)
        else:
            reference = copy.deepcopy(self.strategy.unwrap(self.model))
        reference.to(self.strategy.device).eval()
        reference.requires_grad_(False)
        return reference

    def setup(self) -> None:
        if self.reference is not None and self.precompute_ref_logprobs:
            for examples in (self.parts.train_data, self._eval_examples()):
                self._precompute(examples)
            if not self.collator.mismatched:  # KTO's mismatched rows change per batch: keep it for them
                self.reference = None  # every pair carries its reference log-probs now

    @torch.no_grad()
    def _precompute(self, examples: list[dict[str, Any]]) -> None:
        if all("ref_chosen_logps" in ex for ex in examples):
            return
        mismatched, self.collator.mismatched = self.collator.mismatched, False
        try:
            with self.precision.autocast():
                for start in range(0, len(examples), self.eval_batch_size):
                    chunk = examples[start : start + self.eval_batch_size]
                    sums, _ = completion_logps(self.reference, self._to_device(self.collator(chunk)))
                    n = len(chunk)
                    for i, ex in enumerate(chunk):
                        ex["ref_chosen_logps"] = float(sums[i])
                        ex["ref_rejected_logps"] = float(sums[n + i])
        finally:
            self.collator.mismatched = mismatched

    # one step -----------------------------------------------------------------------------------
    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        device = self.strategy.device
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    def _inputs(self, model: Any, batch: dict[str, Any]) -> PreferenceLogps:
        """What the objective scores: the policy's sums (with grad) and the reference's (without)."""
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
                rows = {k: batch[k][2 * n :] for k in ("input_ids", "attention_mask", "completion_mask")}
                with torch.no_grad():
                    x.ref_kl_logps, _ = completion_logps(self.reference, rows)
            return x
        if self.reference is None:
            raise RuntimeError("the reference log-probs of this batch were not precomputed")
        with torch.no_grad():
            ref, _ = completion_logps(self.reference, batch)
        x.ref_chosen_logps, x.ref_rejected_logps = ref[:n], ref[n : 2 * n]
        if ref.shape[0] > 2 * n:
            x.ref_kl_logps = ref[2 * n :]
        return x

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total, items, tokens = 0.0, 0, 0
        sums: dict[str, float] = {}
        for _ in range(self.grad_accum_steps):
            batch = self._to_device(self.loader.next_batch())
            with self.precision.autocast():
                out = self.objective(self._inputs(self.model, batch))
            loss = out.loss_sum
            if self.precision.scaler is not None:
                loss = self.precision.scaler.scale(loss)
            loss.backward()
            loss_total += out.loss_sum.item()
            items += out.num_items
            tokens += int(batch["attention_mask"].sum())
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v / self.grad_accum_steps
        global_items = self.strategy.all_reduce_sum(float(items))
        scale = self.context.world_size / max(global_items, 1.0)
        for p in self._params:
            if p.grad is not None:
                p.grad.mul_(scale)
        if self.precision.scaler is not None:
            self.precision.scaler.unscale_(self.optimizer)
        grad_norm = self._clip()
        if self.precision.scaler is not None:
            self.precision.scaler.step(self.optimizer)
            self.precision.scaler.update()
        else:
            self.optimizer.step()
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scheduler is not None:
            self.scheduler.step()
        return {
            "loss": loss_total / max(items, 1),
            **sums,
            "accuracy": sums.get("rewards/accuracies", 0.0),
            "margin": sums.get("rewards/margins", 0.0),
            "lr": lr,
            "grad_norm": grad_norm,
            "num_tokens": tokens,
            "epoch": self.loader.epoch,
            "step_time": time.perf_counter() - start,
        }

    def _clip(self) -> float:
        if self.max_grad_norm and self.max_grad_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(self._params, self.max_grad_norm))
        norms = [p.grad.detach().norm() for p in self._params if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0

    # evaluation ---------------------------------------------------------------------------------
    def _eval_examples(self) -> list[dict[str, Any]]:
        data = self.parts.eval_data
        return list(data[: self.max_eval_pairs]) if self.max_eval_pairs else list(data)

    def evaluate(self) -> dict[str, float]:
        metrics = super().evaluate()
        model = self.strategy.unwrap(self.model)
        was_training = model.training
        model.eval()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            metrics.update(self.preference_metrics(model, self._eval_examples()))
        model.train(was_training)
        return metrics

    def _finish(self) -> dict[str, float]:
        if not self.evaluators:  # the base skeleton evaluates at the end only when evaluators are configured
            self._evaluate()
        return super()._finish()

    def preference_metrics(self, model: Any, examples: list[dict[str, Any]]) -> dict[str, float]:
        """Held-out loss, accuracy, margin and reward means, weighted by pairs."""
        if not examples:
            return {}
        totals: dict[str, float] = {}
        loss_sum, items, pairs = 0.0, 0, 0
        for start in range(0, len(examples), self.eval_batch_size):
            batch = self._to_device(self.collator(examples[start : start + self.eval_batch_size]))
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

    # checkpoints --------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
