"""Typed questions: choice (2-26 labelled options), yes/no, and score (2-10 ordered levels).

A question is what a decision asks a model about a state. Its options are shown to the model under
answer labels (A, B, C ... for choice, 1, 2, 3 ... for score, Yes/No for yes/no) and the decision is
a distribution over the options, read from the label tokens' next-token log-probabilities.

The prompt layout and the labels follow AnyJev (``anyjev`` 0.3.0), so that the two readouts agree
on the same model (``tests/decision/test_parity_anyjev.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from toolbox.core.errors import ToolboxError

MAX_OPTIONS = 26  # one letter per option
MAX_LEVELS = 10

Kind = Literal["choice", "yes_no", "score"]


class QuestionError(ToolboxError, ValueError):
    """A question that cannot be asked as given; the message names the fix."""


@dataclass(frozen=True)
class Question:
    """A typed question. Build it with ``Question.choice``, ``Question.yes_no`` or ``Question.score``.

    Attributes:
        kind: "choice", "yes_no" or "score".
        text: the question shown to the model.
        options: the options in the order given (score: the level descriptions, low to high).
        name: a stable id for results and calibrators (default: a hash of the question).
        scale: score only: the value range (lo, hi).
        values: score only: the value of each level, for the expected value.
        described: score only: the levels were given as descriptions (not equal-width bins).
    """

    kind: Kind
    text: str
    options: tuple[str, ...]
    name: str | None = None
    scale: tuple[float, float] = (0.0, 1.0)
    values: tuple[float, ...] | None = None
    described: bool = False

    @classmethod
    def choice(cls, text: str, options: Sequence[str], name: str | None = None) -> Question:
        """Pick one of 2-26 distinct options (shown as ``A. ...``, ``B. ...``)."""
        opts = tuple(str(o) for o in options)
        if len(opts) < 2:
            raise QuestionError(f"a choice question needs at least 2 options, got {len(opts)}; add options")
        if len(opts) > MAX_OPTIONS:
            raise QuestionError(
                f"a choice question takes at most {MAX_OPTIONS} options (one letter each), got {len(opts)}; "
                "split it into several questions or group the options"
            )
        if len(set(opts)) != len(opts):
            dup = sorted({o for o in opts if opts.count(o) > 1})
            raise QuestionError(f"choice options must be distinct; repeated: {dup}")
        return cls("choice", text, opts, name)

    @classmethod
    def yes_no(cls, text: str, name: str | None = None) -> Question:
        """A yes/no question; the decision's ``p_yes`` is the probability of Yes."""
        return cls("yes_no", text, ("Yes", "No"), name)

    @classmethod
    def score(
        cls,
        text: str,
        levels: int | Sequence[str] = 5,
        scale: tuple[float, float] = (0.0, 1.0),
        name: str | None = None,
    ) -> Question:
        """An ordered score: ``levels`` equal-width bins over ``scale`` (2-10), or 2-10 level
        descriptions (low to high, valued 0, 1, 2, ...). The decision's ``value`` is the expected
        value over the levels."""
        if isinstance(levels, int):
            n = levels
            if not 2 <= n <= MAX_LEVELS:
                raise QuestionError(
                    f"a score question takes 2 to {MAX_LEVELS} levels, got {n}; "
                    + ("use a yes_no question for one outcome" if n < 2 else f"use at most {MAX_LEVELS}")
                )
            lo, hi = float(scale[0]), float(scale[1])
            if not hi > lo:
                raise QuestionError(f"score scale must be (lo, hi) with hi > lo, got {scale}")
            edges = [lo + (hi - lo) * i / n for i in range(n + 1)]
            labels = tuple(f"{edges[i]:g} to {edges[i + 1]:g}" for i in range(n))
            values = tuple(lo + (hi - lo) * (i + 0.5) / n for i in range(n))
            return cls("score", text, labels, name, (lo, hi), values)
        described = tuple(str(x) for x in levels)
        if not 2 <= len(described) <= MAX_LEVELS:
            raise QuestionError(
                f"a score question takes 2 to {MAX_LEVELS} levels, got {len(described)}; "
                + ("add a level or use a yes_no question" if len(described) < 2 else "merge levels")
            )
        n = len(described)
        return cls(
            "score", text, described, name, (0.0, float(n - 1)), tuple(float(i) for i in range(n)), True
        )

    @property
    def k(self) -> int:
        """Number of options."""
        return len(self.options)

    @property
    def ordered(self) -> bool:
        """Score levels keep their order: never rotated."""
        return self.kind == "score"

    @property
    def key(self) -> str:
        """A stable hash of the question (keys priors and calibrators)."""
        payload = json.dumps(
            {"kind": self.kind, "text": self.text, "options": list(self.options), "values": self.values},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

    @property
    def id(self) -> str:
        return self.name or f"q_{self.key[:8]}"

    def reversed(self) -> Question:
        """The same question with its options listed in reverse order (choice only)."""
        if self.kind != "choice":
            raise QuestionError("only choice questions can be reversed (yes/no and score keep their order)")
        return Question.choice(self.text, self.options[::-1], self.name and f"{self.name}_reversed")
