"""Preference pairs on arithmetic: the right result (chosen) vs a plausible wrong one (rejected)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits
from toolbox.data.sources.arithmetic import arithmetic, write_result

MISTAKES = ("off_by_one", "off_by_ten", "digit", "no_carry", "swap")


def wrong_answer(a: int, op: str, b: int, result: int, kind: str, rng: random.Random) -> int:
    """A wrong result of ``a op b`` of the given ``kind``: never ``result``, and negative only when
    ``result`` is (so the pairs add no character the right answers lack, e.g. to a tokenizer)."""
    for _ in range(20):
        if kind == "off_by_one":
            wrong = result + rng.choice((-1, 1))
        elif kind == "off_by_ten":
            wrong = result + rng.choice((-10, 10))
        elif kind == "digit":  # one digit replaced by another
            digits = list(str(abs(result)))
            i = rng.randrange(len(digits))
            digits[i] = rng.choice([d for d in "0123456789" if d != digits[i]])
            wrong = int("".join(digits)) * (-1 if result < 0 else 1)
        elif kind == "no_carry" and op == "+":  # each column added mod 10
            da, db = str(a)[::-1], str(b)[::-1]
            cols = [
                (int(da[i]) if i < len(da) else 0) + (int(db[i]) if i < len(db) else 0)
                for i in range(max(len(da), len(db)))
            ]
            wrong = int("".join(str(c % 10) for c in reversed(cols)))
        elif kind == "swap" and abs(result) >= 10:  # two adjacent digits exchanged
            digits = list(str(abs(result)))
            i = rng.randrange(len(digits) - 1)
            digits[i], digits[i + 1] = digits[i + 1], digits[i]
            wrong = int("".join(digits)) * (-1 if result < 0 else 1)
        else:
            wrong = result + rng.choice((-2, -1, 1, 2))
        if wrong != result and (wrong >= 0 or result < 0):  # no minus sign where the right answer has none
            return wrong
        kind = "off_by_one"
    return result + 1 if result >= 0 else result - 1


@SOURCES.register("arithmetic_pairs")
def arithmetic_pairs(
    digits: AtLeastOne = 2,
    operators: Sequence[str] = ("+",),
    num_train: AtLeastOne = 8000,
    num_test: NonNegativeInt = 500,
    seed: int = 1234,
    mistakes: Sequence[str] = MISTAKES,
    pairs_per_problem: AtLeastOne = 1,
    pair_seed: int = 0,
    max_train: AtLeastOne | None = None,
    max_test: AtLeastOne | None = None,
    zero_pad: bool = False,
    reverse_result: bool = False,
) -> Splits:
    """Records {prompt, chosen, rejected, completion, answer} for DPO-style training.

    The problems are those of the ``arithmetic`` source with the same digits, operators, sizes and
    seed, so with the settings of an SFT run they keep its train/test split (no test prompt was
    seen in SFT). ``rejected`` is a plausible mistake drawn from ``mistakes``: off_by_one (±1),
    off_by_ten (±10), digit (one digit changed), no_carry (columns added without carrying) and swap
    (two adjacent digits exchanged). ``completion`` equals ``chosen`` (for exact-match evaluators).

    Args:
        digits: the most digits an operand has.
        operators: the operators to draw from, among "+", "-" and "*".
        num_train: training problems (each gives pairs_per_problem pairs).
        num_test: held-out problems (one pair each).
        seed: seed of the problem draw (as in the arithmetic source).
        mistakes: the kinds of wrong answers to draw from.
        pairs_per_problem: pairs (different wrong answers) per training problem.
        pair_seed: seed of the wrong-answer draw.
        max_train: use only the first this many training problems (null: all).
        max_test: use only the first this many held-out problems (null: all).
        zero_pad: fixed-width operands and results, as the arithmetic source's ``zero_pad``
            (set it as the SFT run did); a rejected answer is padded like the chosen one.
        reverse_result: results least significant digit first, as the arithmetic source's
            ``reverse_result`` (set it as the SFT run did); a rejected answer is written the same way.
    """
    check_mistakes(mistakes)
    if pairs_per_problem < 1:
        raise ConfigError(f"data.source.pairs_per_problem: {pairs_per_problem}; set 1 or more.")
    problems = arithmetic(
        digits=digits,
        operators=operators,
        num_train=num_train,
        num_test=num_test,
        seed=seed,
        zero_pad=zero_pad,
        reverse_result=reverse_result,
    )
    rng = random.Random(pair_seed)

    def pairs(records: Sequence[Record], per_problem: int) -> list[Record]:
        out = []
        for record in records:
            seen: set[str] = set()
            for _ in range(per_problem):
                rejected = wrong_completion(record, mistakes, rng, zero_pad, reverse_result)
                if rejected in seen:
                    continue
                seen.add(rejected)
                out.append({**record, "chosen": record["completion"], "rejected": rejected})
        return out

    train, test = problems.train[:max_train], problems.test[:max_test]
    return Splits(train=pairs(train, pairs_per_problem), test=pairs(test, 1))


def check_mistakes(mistakes: Sequence[str]) -> None:
    unknown = [m for m in mistakes if m not in MISTAKES]
    if unknown or not mistakes:
        raise ConfigError(f"data.source.mistakes: {list(mistakes)}; choose among {list(MISTAKES)}.")


def wrong_completion(
    record: Record, mistakes: Sequence[str], rng: random.Random, zero_pad: bool, reverse: bool = False
) -> str:
    """A plausible wrong result for an arithmetic record (a kind drawn from ``mistakes``), written as
    its right ``completion`` is (padded to its width with ``zero_pad``, reversed with ``reverse``)."""
    a, op, b = _parse(record["prompt"])
    wrong = wrong_answer(a, op, b, int(record["answer"]), rng.choice(list(mistakes)), rng)
    width = len(record["completion"].lstrip("-")) if zero_pad else 0
    return write_result(wrong, width, reverse)


def _parse(prompt: str) -> tuple[int, str, int]:
    body = prompt.removesuffix("=")
    for i in range(1, len(body)):
        if body[i] in "+-*":
            return int(body[:i]), body[i], int(body[i + 1 :])
    raise ValueError(f"not an arithmetic prompt: {prompt!r}")
