"""A decision: a distribution over a question's options, the answer, and the level it was read at.

Levels, weakest first: ``raw`` (one prompt), ``L0`` (rotations and a label-free prior), ``L1``
(L0, then a temperature fitted on labelled items), ``L2`` (a closed-form linear head on a hidden
state, fitted on labelled items). ``decision.require("L0")`` raises ``LevelError`` for a weaker one,
so code that must not act on an uncorrected probability can say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolbox.core.errors import ToolboxError
from toolbox.decision.question import Question

LEVELS = ("raw", "L0", "L1", "L2")
LEVEL_RANK = {level: i for i, level in enumerate(LEVELS)}


class LevelError(ToolboxError, ValueError):
    """A decision was read at a weaker level than the caller requires."""


def check_level(level: str) -> str:
    if level not in LEVEL_RANK:
        raise ValueError(f"unknown decision level {level!r}; use one of {', '.join(LEVELS)}")
    return level


@dataclass
class Decision:
    """One question's answer about one state.

    Attributes:
        question: what was asked.
        probs: ``[K]`` probabilities over ``question.options`` (in the order given), summing to 1.
        level: "raw", "L0", "L1" or "L2".
        diagnostics: how it was read (rotations, prior, raw distribution, flip across rotations, ...).
    """

    question: Question
    probs: np.ndarray
    level: str
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def distribution(self) -> dict[str, float]:
        return {o: float(p) for o, p in zip(self.question.options, self.probs, strict=True)}

    @property
    def index(self) -> int:
        """Index of the most likely option."""
        return int(np.argmax(self.probs))

    @property
    def argmax(self) -> str:
        """The most likely option."""
        return self.question.options[self.index]

    @property
    def confidence(self) -> float:
        return float(np.max(self.probs))

    @property
    def p_yes(self) -> float:
        if self.question.kind != "yes_no":
            raise AttributeError("p_yes is defined for yes/no questions only")
        return float(self.probs[0])

    @property
    def value(self) -> float:
        """Score questions: the expected value over the levels."""
        if self.question.kind != "score":
            raise AttributeError("value is defined for score questions only")
        return float(np.dot(self.probs, np.asarray(self.question.values)))

    @property
    def answer(self) -> Any:
        """choice: the option; yes/no: a bool; score: the expected value."""
        if self.question.kind == "yes_no":
            return self.p_yes >= 0.5
        if self.question.kind == "score":
            return self.value
        return self.argmax

    def require(self, level: str) -> Decision:
        """This decision, or ``LevelError`` if it was read at a weaker level than ``level``."""
        if LEVEL_RANK[self.level] < LEVEL_RANK[check_level(level)]:
            raise LevelError(
                f"decision {self.question.id!r} was read at level {self.level}, and level {level} is "
                f"required; read it with level={level!r}"
                + (
                    " (fit the calibrator first: DecisionReader.fit_l1 / fit_l2)"
                    if level in ("L1", "L2")
                    else ""
                )
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "question": self.question.id,
            "kind": self.question.kind,
            "level": self.level,
            "answer": self.answer,
            "confidence": self.confidence,
            "distribution": self.distribution,
        }
        return out

    def __repr__(self) -> str:
        return f"Decision({self.question.id}: {self.answer!r}, p={self.confidence:.3f}, level={self.level})"
