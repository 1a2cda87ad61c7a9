"""The reward interface, and calling rewards safely.

A reward is any callable ``reward(prompts, completions, **fields) -> list[float | None]``: one score
per completion, where ``fields`` are per-sample lists of the data set's raw columns (``answer``,
``tests``, ...). It is TRL's reward-function signature, so TRL reward functions work here too.
``None`` means "this reward does not apply to this sample" (skipped, not zero).

A reward that raises must not end a run: :func:`call_reward` logs the error with the reward's
name and applies the ``on_error`` policy:

- ``skip``: every sample of the batch gets ``None`` for this reward;
- ``zero``: every sample gets 0.0;
- ``raise``: the exception propagates (for debugging).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

log = logging.getLogger(__name__)

OnError = Literal["skip", "zero", "raise"]
RewardFn = Callable[..., Sequence[float | None]]


class Reward:
    """Base class of the rewards here: a name (for metrics and logs) and the call signature."""

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return getattr(type(self), "_registry_name", type(self).__name__)

    def metrics(self) -> dict[str, float]:
        """Diagnostics collected since the last call (parse failures, timeouts); reset on read."""
        return {}


def reward_name(fn: Any) -> str:
    name = getattr(fn, "name", None)
    if isinstance(name, str):
        return name
    return getattr(fn, "__name__", type(fn).__name__)


def call_reward(
    fn: RewardFn,
    prompts: Sequence[Any],
    completions: Sequence[str],
    fields: dict[str, Sequence[Any]] | None = None,
    on_error: OnError = "skip",
    name: str | None = None,
) -> tuple[list[float | None], bool]:
    """``fn``'s scores, checked (one per completion, finite numbers or None); and whether it failed.

    A failure (an exception, or a wrong number of scores) is logged naming the reward and handled
    by ``on_error``.
    """
    name = name or reward_name(fn)
    n = len(completions)
    try:
        scores = list(fn(prompts, completions, **(fields or {})))
        if len(scores) != n:
            raise ValueError(f"returned {len(scores)} scores for {n} completions")
        out: list[float | None] = []
        for s in scores:
            if s is None:
                out.append(None)
                continue
            value = float(s)
            out.append(value if math.isfinite(value) else None)
        return out, False
    except Exception as e:
        if on_error == "raise":
            raise
        log.warning(
            "reward '%s' failed on a batch of %d (%s: %s); on_error=%s",
            name,
            n,
            type(e).__name__,
            e,
            on_error,
        )
        return ([0.0] * n if on_error == "zero" else [None] * n), True
