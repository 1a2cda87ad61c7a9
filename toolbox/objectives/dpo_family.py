"""Every loss type of TRL 1.16's ``DPOTrainer``, alone or as a weighted sum, with its f-divergences.

``objective=dpo_mix objective.loss_type=[sigmoid,bco_pair,sft] objective.loss_weights=[0.8,0.2,1.0]``
is TRL's MPO combination; each loss type can also be selected alone by its TRL name
(``objective=apo_zero``, ``objective=exo_pair``, ...). The loss of a batch is
``Σ_k w_k · mean_pairs(loss_k)``, as TRL computes it.

The loss types built on the chosen − rejected score difference (``sigmoid``, ``sigmoid_norm``,
``hinge``, ``ipo``, ``exo_pair``, ``robust``, ``discopop``, ``sft``) take an f-divergence regulariser
between policy and reference (f-DPO, Wang et al. 2023): the log-ratio ``u = log π/π_ref`` of each
completion is replaced by ``f'(exp u)``:

- ``reverse_kl``: ``u`` (standard DPO);
- ``forward_kl``: ``1 − exp(−u)``;
- ``js_divergence``: ``log 2 + log σ(u)``;
- ``alpha_divergence``: ``(exp((α−1)·u) − 1)/(α−1)`` (``f_alpha_divergence_coef`` = α).

The others (``nca_pair``, ``bco_pair``, ``sppo_hard``, ``aot``, ``aot_unpaired``, ``apo_zero``,
``apo_down``) have no f-divergence generalisation and refuse a non-default one, as TRL does.

``sft`` is the mean negative log-likelihood over the chosen completions' tokens (the RPO term when
combined with ``sigmoid``). ``aot`` and ``aot_unpaired`` sort the batch's log-ratios, so their
per-pair losses couple the pairs of one micro-batch (as in TRL).

``tests/objectives/test_dpo_family_parity.py`` runs ``DPOTrainer._compute_loss`` on the same
tensors for every type, divergence and a mix (1e-6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.preference import PairLoss, PreferenceLogps

FDivergence = Literal["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"]

#: the loss types that accept a non-default f-divergence (TRL's list)
F_DIVERGENCE_TYPES = frozenset(
    {"sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft"}
)


def f_divergence_scores(logratios: Tensor, divergence: str, alpha: float = 0.5) -> Tensor:
    """``f'(π/π_ref)`` of each completion from its log-ratio ``u = log π − log π_ref``."""
    if divergence == "reverse_kl":
        return logratios
    if divergence == "forward_kl":
        return 1 - torch.exp(-logratios)
    if divergence == "js_divergence":
        return math.log(2) + F.logsigmoid(logratios)
    if divergence == "alpha_divergence":
        if abs(alpha - 1.0) < 1e-6:  # the limit α → 1 is reverse KL
            return logratios
        t = (alpha - 1.0) * logratios
        clamp_max = {torch.float16: 11.0, torch.bfloat16: 80.0}.get(t.dtype, 80.0)  # exp stays finite
        return (torch.exp(torch.clamp(t.float(), max=clamp_max)) - 1.0).to(t.dtype) / (alpha - 1.0)
    raise ConfigError(
        f"objective.f_divergence_type: {divergence!r}; choose reverse_kl, forward_kl, js_divergence "
        "or alpha_divergence."
    )


class _Pairs:
    """What one loss type reads: the log-ratios, their f-divergence scores and the raw log-probs."""

    def __init__(self, x: PreferenceLogps, loss: DPOMixLoss) -> None:
        self.x = x
        self.beta = loss.beta
        self.eps = loss.label_smoothing
        self.tau = loss.discopop_tau
        self.chosen = x.chosen_logps - x.ref_chosen_logps
        self.rejected = x.rejected_logps - x.ref_rejected_logps
        self.chosen_scores = f_divergence_scores(
            self.chosen, loss.f_divergence_type, loss.f_alpha_divergence_coef
        )
        self.rejected_scores = f_divergence_scores(
            self.rejected, loss.f_divergence_type, loss.f_alpha_divergence_coef
        )
        self.delta = self.chosen_scores - self.rejected_scores

    def length_normalised_delta(self) -> Tensor:
        return self.chosen_scores / self.x.chosen_lengths.clamp(min=1.0) - self.rejected_scores / (
            self.x.rejected_lengths.clamp(min=1.0)
        )


def _smoothed_sigmoid(logits: Tensor, eps: float) -> Tensor:
    return -F.logsigmoid(logits) * (1 - eps) - F.logsigmoid(-logits) * eps


def _sigmoid(p: _Pairs) -> Tensor:
    return -F.logsigmoid(p.beta * p.delta)


def _hinge(p: _Pairs) -> Tensor:
    return torch.relu(1 - p.beta * p.delta)


def _ipo(p: _Pairs) -> Tensor:
    return (p.length_normalised_delta() - 1 / (2 * p.beta)) ** 2


def _exo_pair(p: _Pairs) -> Tensor:
    logits = p.beta * p.delta
    eps = torch.tensor(p.eps, dtype=logits.dtype)
    return torch.sigmoid(logits) * (F.logsigmoid(logits) - torch.log1p(-eps)) + torch.sigmoid(-logits) * (
        F.logsigmoid(-logits) - torch.log(eps)
    )


def _nca_pair(p: _Pairs) -> Tensor:
    chosen, rejected = p.beta * p.chosen, p.beta * p.rejected
    return -F.logsigmoid(chosen) - 0.5 * F.logsigmoid(-chosen) - 0.5 * F.logsigmoid(-rejected)


def _robust(p: _Pairs) -> Tensor:
    logits = p.beta * p.delta
    clean = -(1 - p.eps) * F.logsigmoid(logits)
    flipped = -p.eps * F.logsigmoid(-logits)
    return (clean - flipped) / (1 - 2 * p.eps)


def _bco_pair(p: _Pairs) -> Tensor:
    return -F.logsigmoid(p.beta * p.chosen) - F.logsigmoid(-p.beta * p.rejected)


def _sppo_hard(p: _Pairs) -> Tensor:
    return (p.chosen - 0.5 / p.beta) ** 2 + (p.rejected + 0.5 / p.beta) ** 2


def _aot(p: _Pairs) -> Tensor:
    logratios, _ = torch.sort(p.x.chosen_logps - p.x.rejected_logps, dim=0)
    ref, _ = torch.sort(p.x.ref_chosen_logps - p.x.ref_rejected_logps, dim=0)
    return _smoothed_sigmoid(p.beta * (logratios - ref), p.eps)


def _aot_unpaired(p: _Pairs) -> Tensor:
    chosen, _ = torch.sort(p.chosen, dim=0)
    rejected, _ = torch.sort(p.rejected, dim=0)
    return _smoothed_sigmoid(p.beta * (chosen - rejected), p.eps)


def _apo_zero(p: _Pairs) -> Tensor:
    return (1 - torch.sigmoid(p.beta * p.chosen)) + torch.sigmoid(p.beta * p.rejected)


def _apo_down(p: _Pairs) -> Tensor:
    return torch.sigmoid(p.beta * p.chosen) + (1 - torch.sigmoid(p.beta * (p.chosen - p.rejected)))


def _discopop(p: _Pairs) -> Tensor:
    logits = p.beta * p.delta
    modulation = torch.sigmoid(logits / p.tau)
    return -F.logsigmoid(logits) * (1 - modulation) + torch.exp(-logits) * modulation


def _sft(p: _Pairs) -> Tensor:
    nll = -p.x.chosen_logps.sum() / p.x.chosen_lengths.sum().clamp(min=1.0)  # mean over chosen tokens
    return nll.expand(p.x.chosen_logps.shape[0])


def _sigmoid_norm(p: _Pairs) -> Tensor:
    return -F.logsigmoid(p.beta * p.length_normalised_delta())


#: TRL's loss types, each a per-pair loss of the batch
LOSS_TYPES: dict[str, Callable[[_Pairs], Tensor]] = {
    "sigmoid": _sigmoid,
    "hinge": _hinge,
    "ipo": _ipo,
    "exo_pair": _exo_pair,
    "nca_pair": _nca_pair,
    "robust": _robust,
    "bco_pair": _bco_pair,
    "sppo_hard": _sppo_hard,
    "aot": _aot,
    "aot_unpaired": _aot_unpaired,
    "apo_zero": _apo_zero,
    "apo_down": _apo_down,
    "discopop": _discopop,
    "sft": _sft,
    "sigmoid_norm": _sigmoid_norm,
}


@OBJECTIVES.register("dpo_mix")
class DPOMixLoss(PairLoss):
    """Any of TRL 1.16 DPOTrainer's loss types, or a weighted sum of several (MPO).

    Args:
        loss_type: one loss type or a list of them: sigmoid, hinge, ipo, exo_pair, nca_pair, robust,
            bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft, sigmoid_norm.
        loss_weights: one weight per loss type (null: 1.0 each).
        beta: the KL strength β (for ipo the regulariser τ).
        label_smoothing: ε of robust (the flip probability, in [0, 0.5)), exo_pair (EXO's ε, in
            (0, 1); the paper suggests 1e-3) and aot/aot_unpaired.
        f_divergence_type: reverse_kl (DPO), forward_kl, js_divergence or alpha_divergence.
        f_alpha_divergence_coef: α of alpha_divergence.
        discopop_tau: τ of discopop's log-ratio modulation (0.05 in the paper).
    """

    def __init__(
        self,
        loss_type: str | Sequence[str] = "sigmoid",
        loss_weights: Sequence[float] | None = None,
        beta: float = 0.1,
        label_smoothing: float = 0.0,
        f_divergence_type: FDivergence = "reverse_kl",
        f_alpha_divergence_coef: float = 0.5,
        discopop_tau: float = 0.05,
    ) -> None:
        super().__init__(beta)
        types = [loss_type] if isinstance(loss_type, str) else list(loss_type)
        unknown = [t for t in types if t not in LOSS_TYPES]
        if not types or unknown:
            raise ConfigError(
                f"objective.loss_type: {unknown[0] if unknown else 'empty'!r}; choose from "
                f"{', '.join(LOSS_TYPES)} (one or a list)."
            )
        weights = [1.0] * len(types) if loss_weights is None else [float(w) for w in loss_weights]
        if len(weights) != len(types):
            raise ConfigError(
                f"objective.loss_weights: {len(weights)} weights for {len(types)} loss types; give one each."
            )
        if f_divergence_type != "reverse_kl" and not set(types) <= F_DIVERGENCE_TYPES:
            raise ConfigError(
                f"objective.f_divergence_type: {f_divergence_type!r} applies only to "
                f"{', '.join(sorted(F_DIVERGENCE_TYPES))}; use reverse_kl with {', '.join(types)}."
            )
        f_divergence_scores(torch.zeros(1), f_divergence_type, f_alpha_divergence_coef)  # names a bad one now
        if "robust" in types and not 0.0 <= label_smoothing < 0.5:
            raise ConfigError(
                f"objective.label_smoothing: {label_smoothing}; robust needs a value in [0, 0.5)."
            )
        if "exo_pair" in types and not 0.0 < label_smoothing < 1.0:
            raise ConfigError(
                f"objective.label_smoothing: {label_smoothing}; exo_pair needs ε in (0, 1) (1e-3 is usual)."
            )
        if discopop_tau <= 0:
            raise ConfigError(
                f"objective.discopop_tau: {discopop_tau}; set a positive number (0.05 is usual)."
            )
        self.loss_types = types
        self.loss_weights = weights
        self.label_smoothing = label_smoothing
        self.f_divergence_type = f_divergence_type
        self.f_alpha_divergence_coef = f_alpha_divergence_coef
        self.discopop_tau = discopop_tau

    def losses(self, x: PreferenceLogps) -> tuple:
        self._logratios(x)  # a clear error when the reference log-probs are missing
        pairs = _Pairs(x, self)
        total = None
        extra: dict[str, float] = {}
        for name, weight in zip(self.loss_types, self.loss_weights, strict=True):
            per_pair = LOSS_TYPES[name](pairs)
            if len(self.loss_types) > 1:
                extra[f"loss/{name}"] = per_pair.detach().float().mean().item()
            total = weight * per_pair if total is None else total + weight * per_pair
        return total, self.beta * pairs.chosen.detach(), self.beta * pairs.rejected.detach(), extra


# One registered objective per TRL loss type that takes no list: DPOMixLoss with that one type fixed.


@OBJECTIVES.register("exo_pair")
class ExoPairLoss(DPOMixLoss):
    """EXO-pref (Ji et al. 2024): reverse KL to the smoothed label (TRL's ``loss_type='exo_pair'``).

    Args:
        beta: the KL strength β.
        label_smoothing: ε (see dpo_mix).
    """

    def __init__(self, beta: float = 0.1, label_smoothing: float = 1e-3) -> None:
        super().__init__("exo_pair", beta=beta, label_smoothing=label_smoothing)


@OBJECTIVES.register("nca_pair")
class NcaPairLoss(DPOMixLoss):
    """NCA (Chen et al. 2024): absolute likelihood of chosen and rejected (TRL's ``loss_type='nca_pair'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("nca_pair", beta=beta)


@OBJECTIVES.register("bco_pair")
class BcoPairLoss(DPOMixLoss):
    """BCO on pairs (Jung et al. 2024): chosen up, rejected down, separately (TRL's ``loss_type='bco_pair'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("bco_pair", beta=beta)


@OBJECTIVES.register("sppo_hard")
class SppoHardLoss(DPOMixLoss):
    """SPPO with hard win probabilities (Wu et al. 2024) (TRL's ``loss_type='sppo_hard'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("sppo_hard", beta=beta)


@OBJECTIVES.register("aot")
class AotLoss(DPOMixLoss):
    """AOT (Melnyk et al. 2024): distributional alignment of sorted log-ratios (TRL's ``loss_type='aot'``).

    Args:
        beta: the KL strength β.
        label_smoothing: ε (see dpo_mix).
    """

    def __init__(self, beta: float = 0.1, label_smoothing: float = 0.0) -> None:
        super().__init__("aot", beta=beta, label_smoothing=label_smoothing)


@OBJECTIVES.register("aot_unpaired")
class AotUnpairedLoss(DPOMixLoss):
    """AOT on unpaired data: sorted chosen vs sorted rejected (TRL's ``loss_type='aot_unpaired'``).

    Args:
        beta: the KL strength β.
        label_smoothing: ε (see dpo_mix).
    """

    def __init__(self, beta: float = 0.1, label_smoothing: float = 0.0) -> None:
        super().__init__("aot_unpaired", beta=beta, label_smoothing=label_smoothing)


@OBJECTIVES.register("apo_zero")
class ApoZeroLoss(DPOMixLoss):
    """APO-zero (D'Oosterlinck et al. 2024): chosen up, rejected down (TRL's ``loss_type='apo_zero'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("apo_zero", beta=beta)


@OBJECTIVES.register("apo_down")
class ApoDownLoss(DPOMixLoss):
    """APO-down: both down, rejected more (TRL's ``loss_type='apo_down'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("apo_down", beta=beta)


@OBJECTIVES.register("discopop")
class DiscopopLoss(DPOMixLoss):
    """DiscoPOP (Chris Lu et al. 2024): log-ratio modulated loss (TRL's ``loss_type='discopop'``).

    Args:
        beta: the KL strength β.
        discopop_tau: τ of the log-ratio modulation.
    """

    def __init__(self, beta: float = 0.1, discopop_tau: float = 0.05) -> None:
        super().__init__("discopop", beta=beta, discopop_tau=discopop_tau)


@OBJECTIVES.register("sigmoid_norm")
class SigmoidNormLoss(DPOMixLoss):
    """DPO's sigmoid on length-normalised log-ratios (TRL's ``loss_type='sigmoid_norm'``).

    Args:
        beta: the KL strength β.
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__("sigmoid_norm", beta=beta)
