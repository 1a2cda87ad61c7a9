"""L0: rotations and label priors, without labels (as AnyJev's ``calibrate`` package, in torch).

Position bias: the options are read in every cyclic rotation, so each option sits at each position
once, and the per-option log-probabilities are averaged over the rotations ("logmean", Zheng et al.
2024). If a position adds a constant to its label's logit, the average removes it exactly.

Label prior: the model's preference for some labels whatever the input is estimated without labels
and divided out (Zhao et al. 2021; Zhou et al. 2024): the *batch* prior is the mean raw distribution
per rotation over the states read so far (used once ``min_n`` states were seen, raised to the
power 0.75); the *content-free* prior is the mean distribution on content-free states ("N/A", "",
"[MASK]"), at full strength.

The same functions serve the reader (float64, no gradient) and the training objectives (log space,
with gradient): there is one implementation of the arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

PRIOR_EPS = 1e-8  # AnyJev's clip on priors and corrected distributions
LOG_EPS = 1e-12  # AnyJev's clip before the log in the logmean
CONTENT_FREE_PROBES = ("N/A", "", "[MASK]")
DEFAULT_STRENGTH = {"batch": 0.75, "content_free": 1.0, "none": 0.0}


def cyclic_shifts(k: int, max_rotations: int | None = None) -> list[list[int]]:
    """``perm[j]`` = the option shown at position j, for rotations 0, 1, ... (at most ``max_rotations``)."""
    n = k if max_rotations is None else max(1, min(k, max_rotations))
    return [[(j + s) % k for j in range(k)] for s in range(n)]


def to_options(by_position: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """``[..., P, K]`` indexed by position -> indexed by option (``perms``: ``[P, K]``, option at position)."""
    inverse = torch.argsort(perms, dim=-1)  # inverse[s, i] = position of option i in rotation s
    return by_position.gather(-1, inverse.expand(by_position.shape))


def logmean(log_by_option: torch.Tensor) -> torch.Tensor:
    """Log-distribution ``[..., K]``: the mean over rotations (dim -2) of per-option log-probs, renormalised."""
    return torch.log_softmax(log_by_option.mean(dim=-2), dim=-1)


def marginalize(p_by_position: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """The L0 combination of probabilities ``[..., P, K]`` (by position) into ``[..., K]`` by option."""
    by_option = to_options(p_by_position, perms)
    return logmean(torch.log(by_option.clamp_min(LOG_EPS))).exp()


def batch_prior(p_by_position: torch.Tensor) -> torch.Tensor:
    """Mean distribution over states (dim 0): ``[N, P, K]`` -> ``[P, K]``, clipped and renormalised."""
    p = p_by_position.mean(dim=0).clamp_min(PRIOR_EPS)
    return p / p.sum(dim=-1, keepdim=True)


def content_free_prior(p_probes: torch.Tensor) -> torch.Tensor:
    """Mean over the probes (dim -2): ``[..., C, K]`` -> ``[..., K]``, clipped and renormalised."""
    p = p_probes.mean(dim=-2).clamp_min(PRIOR_EPS)
    return p / p.sum(dim=-1, keepdim=True)


def divide_prior(p: torch.Tensor, prior: torch.Tensor, strength: float) -> torch.Tensor:
    """``normalise(p / prior**strength)``, with AnyJev's clips."""
    q = p / prior.pow(strength).clamp_min(PRIOR_EPS)
    q = q.clamp_min(PRIOR_EPS)
    return q / q.sum(dim=-1, keepdim=True)


def flip_rate(p_by_position: torch.Tensor, perms: Sequence[Sequence[int]]) -> float:
    """Fraction of rotations whose answer (an option) differs from the first rotation's."""
    winners = [perm[int(torch.argmax(p_by_position[s]))] for s, perm in enumerate(perms)]
    if len(winners) <= 1:
        return 0.0
    return sum(w != winners[0] for w in winners[1:]) / (len(winners) - 1)
