"""Decision objectives: train a model's one-pass (raw) readout, through the supervised trainer.

Both read the label tokens at the answer position of every row of a ``decision`` batch (the
collator of ``toolbox.decision.data``), as the reader does: the log-softmax over the vocabulary,
restricted to the K label tokens and renormalised (the "restricted label softmax"), then mapped
from positions to options.

- ``decision_ce``: cross entropy of the labelled option under the restricted softmax, every row
  (every option order of an item) counted. Two optional auxiliary targets (the data's ``hints``)
  scaffold the lookup a model trained from scratch has to learn (find the option the state names,
  answer the label listed beside it): ``hint_weight``, at the token before the answer and at the
  answer position, the first token of the labelled option's text; ``bind_weight``, at each option's
  first token, the label listed beside it. Both are read through the output of decoder layer
  ``hint_layer`` (the final norm and LM head applied to it; null: the model's logits), so a 2-layer
  model has the state's option and each option's label in its residual stream before the last
  layer, where the answer can match and copy them.
- ``decision_distill``: self-distillation. The teacher is the model's own L0 distribution over the
  batch's rotations (log-mean over the rotations after dividing the batch prior out, exactly as the
  reader's L0, with no gradient), or a ``teacher`` distribution the data carries (a reasoning
  pass's, say); ``teacher_model="frozen"`` reads that L0 from a copy of the model taken at the
  first step (a self-taught teacher that follows the student can settle with it on one flat
  distribution under every order: examples/decision_intent measured that collapse). The loss is ``KL(teacher || raw)``, raw being the first order read (the base
  order), plus ``consistency`` times the permutation-consistency term: the mean over the rotations
  of ``KL(consensus || rotation)``, the consensus being the log-mean of the rotations (no
  gradient). No labels are used; ``ce_weight`` > 0 adds the supervised term.

Both are ``SupervisedObjective``s: they return a loss summed over items and the item count, and the
supervised trainer takes the one optimizer step.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

import toolbox.decision.calibrate as cal
from toolbox.core.registries import OBJECTIVES
from toolbox.nn.llama_training import LlamaTrainingForward
from toolbox.objectives.base import LossOutput, SupervisedObjective


def label_logprobs(model: Any, batch: dict[str, Any], logits: torch.Tensor | None = None) -> torch.Tensor:
    """Restricted label log-softmax by option, ``[B, R, K]`` (rotation r of item b, option k).

    ``logits``: the answer positions' logits ``[B*R, V]`` when already computed."""
    ids, last = batch["input_ids"], batch["last"]
    b, r, k = batch["perms"].shape
    rows = torch.arange(ids.shape[0], device=ids.device)
    if logits is not None:
        pass
    elif getattr(model, "accepts_logits_mask", False):  # the lean training forward: only these logits
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[rows, last] = True
        logits = model(input_ids=ids, logits_mask=mask).logits
    else:  # right padding: causal attention never looks right, so no mask is needed
        logits = model(input_ids=ids).logits[rows, last]
    full = torch.log_softmax(logits.float(), dim=-1)
    restricted = torch.log_softmax(full.gather(-1, batch["label_ids"]), dim=-1)  # [B*R, K] by position
    return cal.to_options(restricted.view(b, r, k), batch["perms"])


def _kl(target_log: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``KL(p || q)`` summed over the last dim, from log-probabilities."""
    return (target_log.exp() * (target_log - log_q)).sum(dim=-1)


@OBJECTIVES.register("decision_ce")
class DecisionCE(SupervisedObjective):
    """Cross entropy of the labelled option under the restricted label softmax (every option order).

    Args:
        label_smoothing: mass moved uniformly over the K options.
        hint_weight: weight of the hint target (per row: the cross entropy, at the token before the
            answer and at the answer position, of the labelled option's first token); needs
            ``data.dataset.hints=true``.
        bind_weight: weight of the binding target (per row: the summed cross entropy, at each
            option's first token, of the label listed beside it); needs ``data.dataset.hints=true``.
        hint_layer: the decoder layer (1-based) whose output the auxiliary targets read, through
            the final norm and LM head; null: the model's own logits (at the answer position the
            hint is then not asked: the answer is).
    """

    accuracy_name = "decision_accuracy"

    def __init__(
        self,
        label_smoothing: float = 0.0,
        hint_weight: float = 0.0,
        bind_weight: float = 0.0,
        hint_layer: int | None = None,
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError("objective.label_smoothing must be in [0, 1)")
        if hint_weight < 0 or bind_weight < 0:
            raise ValueError("objective.hint_weight and bind_weight must be >= 0")
        if hint_layer is not None and hint_layer < 1:
            raise ValueError(f"objective.hint_layer: {hint_layer}; use a decoder layer >= 1, or null")
        self.label_smoothing = label_smoothing
        self.hint_weight = hint_weight
        self.bind_weight = bind_weight
        self.hint_layer = hint_layer

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        aux = self.hint_weight or self.bind_weight
        if aux:
            logits, aux_logits = self._forward(model, batch)
            rows = torch.arange(logits.shape[0], device=logits.device)
            logp = label_logprobs(model, batch, logits[rows, batch["last"]])
        else:
            logp = label_logprobs(model, batch)
        b, r, k = logp.shape
        target = batch["target"].repeat_interleave(r)
        loss = F.nll_loss(logp.reshape(b * r, k), target, reduction="sum")
        if self.label_smoothing:
            loss = (1 - self.label_smoothing) * loss - self.label_smoothing * logp.mean(dim=-1).sum()
        metrics: dict[str, float] = {}
        if aux:
            hint, bind = self._auxiliary(aux_logits, batch, target)
            loss = loss + self.hint_weight * hint + self.bind_weight * bind
            metrics = {"hint_ce": float(hint.detach()), "bind_ce": float(bind.detach())}
        with torch.no_grad():
            metrics["correct"] = float((logp.argmax(-1).reshape(-1) == target).sum())
        return LossOutput(loss, b * r, metrics)

    def _forward(self, model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(every position's logits, the logits the auxiliary targets read), from one forward."""
        if "option_pos" not in batch:
            raise ValueError(
                "objective.hint_weight / bind_weight need the option positions in the data: set "
                "data.dataset.hints=true"
            )
        if isinstance(model, LlamaTrainingForward):  # the lean forward gives no hidden states
            model = model.model
        if self.hint_layer is None:
            logits = model(input_ids=batch["input_ids"]).logits
            return logits, logits
        layers = model.config.num_hidden_layers
        if self.hint_layer > layers:
            raise ValueError(f"objective.hint_layer: {self.hint_layer}, but the model has {layers} layers")
        out = model(input_ids=batch["input_ids"], output_hidden_states=True)
        hidden = out.hidden_states[self.hint_layer]  # hidden_states[0]: the embeddings
        if self.hint_layer < layers:  # the last entry already has the final norm applied
            hidden = model.model.norm(hidden)
        return out.logits, model.lm_head(hidden)

    def _auxiliary(
        self, logits: torch.Tensor, batch: dict[str, Any], target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hint, bind) cross entropies summed over the rows."""
        ids, last, pos = batch["input_ids"], batch["last"], batch["option_pos"]
        rows = torch.arange(ids.shape[0], device=ids.device)
        shown_at = torch.argsort(batch["perms"].reshape(ids.shape[0], -1), dim=-1)  # option -> position
        answer_pos = pos[rows, shown_at[rows, target]]  # where the labelled option's text starts
        hint_token = ids[rows, answer_pos]
        where = [last - 1] if self.hint_layer is None else [last - 1, last]
        hint = sum(F.cross_entropy(logits[rows, p].float(), hint_token, reduction="sum") for p in where)
        k = pos.shape[1]
        bind = F.cross_entropy(
            logits[rows.repeat_interleave(k), pos.reshape(-1)].float(),
            batch["label_ids"].reshape(-1),
            reduction="sum",
        )
        return hint, bind


@OBJECTIVES.register("decision_distill")
class DecisionDistill(SupervisedObjective):
    """Self-distillation of the raw readout onto the model's own L0, plus permutation consistency.

    Args:
        consistency: weight of the permutation-consistency term.
        ce_weight: weight of the supervised cross entropy of the raw readout (0: no labels used).
        prior: the teacher's label prior: "batch" (the batch's mean distribution per rotation,
            once it has ``min_prior_n`` items) or "none".
        prior_strength: the prior's exponent (AnyJev's 0.75).
        min_prior_n: items a batch needs before its prior is used.
        teacher_temperature: the teacher's log-probabilities are divided by it and renormalised
            (below 1: a sharper teacher, against the collapse of a self-taught model onto one flat
            distribution under every order; 1: the teacher as it is).
        teacher_model: whose L0 teaches: "self" (the model being trained, as it is at each step)
            or "frozen" (a copy of the model taken at the first step, never trained: the teacher
            cannot drift with the student, so the pair cannot settle on one flat distribution under
            every order; costs a second copy of the weights and a second forward).
    """

    accuracy_name = "decision_accuracy"

    def __init__(
        self,
        consistency: float = 1.0,
        ce_weight: float = 0.0,
        prior: str = "batch",
        prior_strength: float = 0.75,
        min_prior_n: int = 8,
        teacher_temperature: float = 1.0,
        teacher_model: str = "self",
    ) -> None:
        if teacher_model not in ("self", "frozen"):
            raise ValueError(f"objective.teacher_model={teacher_model!r}: use self or frozen")
        self.teacher_model = teacher_model
        self._frozen: Any = None
        if prior not in ("batch", "none"):
            raise ValueError(f"objective.prior={prior!r}: use batch or none")
        if teacher_temperature <= 0:
            raise ValueError(f"objective.teacher_temperature={teacher_temperature}: use a value > 0")
        self.teacher_temperature = teacher_temperature
        self.consistency = consistency
        self.ce_weight = ce_weight
        self.prior = prior
        self.prior_strength = prior_strength
        self.min_prior_n = min_prior_n

    def teacher(self, logp: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
        """The L0 log-distribution ``[B, K]`` from the rotations' log-probs by option (no gradient)."""
        with torch.no_grad():
            by_position = torch.gather(logp, -1, perms).exp().double()  # back to positions
            if self.prior == "batch" and logp.shape[0] >= self.min_prior_n:
                by_position = cal.divide_prior(by_position, cal.batch_prior(by_position), self.prior_strength)
            return torch.log(cal.marginalize(by_position, perms).clamp_min(cal.LOG_EPS)).float()

    def _frozen_logprobs(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        """The label log-probs of the copy taken at the first call (no gradient)."""
        if self._frozen is None:
            frozen = copy.deepcopy(model)  # the model, or the training forward holding it
            module = frozen if isinstance(frozen, torch.nn.Module) else frozen.model
            module.eval().requires_grad_(False)
            self._frozen = frozen
        with torch.no_grad():
            return label_logprobs(self._frozen, batch)

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        logp = label_logprobs(model, batch)  # [B, R, K] by option
        b, r, _ = logp.shape
        if "teacher" in batch:
            teacher = torch.log(batch["teacher"].float().clamp_min(cal.LOG_EPS))
        else:
            if r < 2:
                raise ValueError(
                    "decision_distill needs at least 2 option orders per item for its L0 teacher "
                    "(data.dataset.rotations=null for all K), or a teacher distribution in the data"
                )
            teacher = self.teacher(
                self._frozen_logprobs(model, batch) if self.teacher_model == "frozen" else logp,
                batch["perms"],
            )
        if self.teacher_temperature != 1.0:
            teacher = torch.log_softmax(teacher / self.teacher_temperature, dim=-1)
        distill = _kl(teacher, logp[:, 0])  # [B]
        loss = distill.sum()
        metrics = {"distill_kl": float(distill.detach().sum())}
        if r > 1 and self.consistency:
            consensus = cal.logmean(logp).detach()  # [B, K]
            consistency = _kl(consensus.unsqueeze(1), logp).mean(dim=1)  # [B]
            loss = loss + self.consistency * consistency.sum()
            metrics["consistency_kl"] = float(consistency.detach().sum())
        if self.ce_weight:
            loss = loss + self.ce_weight * F.nll_loss(logp[:, 0], batch["target"], reduction="sum")
        with torch.no_grad():
            answers = logp.argmax(-1)  # [B, R] options
            metrics["correct"] = float((answers[:, 0] == batch["target"]).sum())
            metrics["flips"] = float((answers != answers[:, :1]).float().mean(dim=1).sum())
        return LossOutput(loss, b, metrics)
