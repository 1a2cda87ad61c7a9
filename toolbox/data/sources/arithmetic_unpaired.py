"""Unpaired preference data on arithmetic (KTO): each problem with one right or one wrong result."""

from __future__ import annotations

import random
from collections.abc import Sequence

from toolbox.core.bounds import AtLeastOne, Fraction, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits
from toolbox.data.sources.arithmetic import arithmetic
from toolbox.data.sources.arithmetic_pairs import MISTAKES, check_mistakes, wrong_completion


@SOURCES.register("arithmetic_unpaired")
def arithmetic_unpaired(
    digits: AtLeastOne = 2,
    operators: Sequence[str] = ("+",),
    num_train: AtLeastOne = 8000,
    num_test: NonNegativeInt = 500,
    seed: int = 1234,
    mistakes: Sequence[str] = MISTAKES,
    desirable_fraction: Fraction = 0.5,
    label_seed: int = 0,
    max_train: AtLeastOne | None = None,
    max_test: AtLeastOne | None = None,
    zero_pad: bool = False,
) -> Splits:
    """Records {prompt, completion, label, answer, reference} in TRL's unpaired preference format.

    The problems are those of the ``arithmetic`` source with the same settings (so with the
    settings of an SFT run they keep its train/test split). Each problem gives one record: with
    probability ``desirable_fraction`` its right result (``label`` true), otherwise a plausible
    mistake drawn from ``mistakes`` as in ``arithmetic_pairs`` (``label`` false). ``completion`` is
    that labelled result; ``reference`` is always the right one (exact-match evaluators read it:
    ``eval.exact_match.reference_field=reference``) and ``answer`` the plain number.

    Args:
        digits: the most digits an operand has.
        operators: the operators to draw from, among "+", "-" and "*".
        num_train: training problems (one record each).
        num_test: held-out problems (one record each).
        seed: seed of the problem draw (as in the arithmetic source).
        mistakes: the kinds of wrong answers to draw from.
        desirable_fraction: the probability that a problem's completion is its right result.
        label_seed: seed of the label and wrong-answer draws (train and test draw apart).
        max_train: use only the first this many training problems (null: all).
        max_test: use only the first this many held-out problems (null: all).
        zero_pad: fixed-width operands and results, as the arithmetic source's ``zero_pad``.
    """
    check_mistakes(mistakes)
    if not 0.0 <= desirable_fraction <= 1.0:
        raise ConfigError(f"data.source.desirable_fraction: {desirable_fraction}; set a value in [0, 1].")
    problems = arithmetic(
        digits=digits,
        operators=operators,
        num_train=num_train,
        num_test=num_test,
        seed=seed,
        zero_pad=zero_pad,
    )

    def unpaired(records: Sequence[Record], rng: random.Random) -> list[Record]:
        out = []
        for record in records:
            right = record["completion"]
            if rng.random() < desirable_fraction:
                out.append({**record, "completion": right, "label": True, "reference": right})
                continue
            completion = wrong_completion(record, mistakes, rng, zero_pad)
            out.append({**record, "completion": completion, "label": False, "reference": right})
        return out

    train, test = problems.train[:max_train], problems.test[:max_test]
    return Splits(
        train=unpaired(train, random.Random(label_seed)),
        test=unpaired(test, random.Random(label_seed + 1_000_003)),
    )
