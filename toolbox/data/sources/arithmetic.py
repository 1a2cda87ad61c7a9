"""Generated arithmetic problems: ``12+34=`` → ``46``, with disjoint train and test splits."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits

OPERATORS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@SOURCES.register("arithmetic")
def arithmetic(
    digits: AtLeastOne = 2,
    operators: Sequence[str] = ("+",),
    num_train: AtLeastOne = 9000,
    num_test: NonNegativeInt = 500,
    seed: int = 0,
    zero_pad: bool = False,
    reverse_result: bool = False,
) -> Splits:
    """Problems ``a<op>b=`` with their result, as records {prompt, completion, answer}.

    Operands run from 0 to 10**digits - 1; a subtraction may have a negative result. Problems are
    drawn without replacement from every (operator, a, b), so no prompt is in both splits, and the
    draw depends only on the settings. Asking for more problems than exist is a ConfigError.

    Args:
        digits: the most digits an operand has (operands are 0 .. 10**digits - 1).
        operators: the operators to draw from, among "+", "-" and "*".
        num_train: training problems.
        num_test: held-out problems, none of which is a training problem.
        seed: seed of the draw.
        zero_pad: write operands with exactly ``digits`` digits and results of "+" with
            ``digits + 1`` ("07+45=052"): every digit keeps its position, which small models learn
            much faster. ``answer`` stays the plain number ("52").
        reverse_result: write the result's digits least significant first, as a model adds
            ("07+45=250" with zero_pad): each digit then depends only on the digits already
            written and the carry, so a small model learns addition robustly (without it, when
            the carry is found is sensitive to seed and float rounding). ``answer`` stays the
            plain number ("52"); a minus sign stays in front.
    """
    if digits < 1:
        raise ConfigError(f"data.source.digits: {digits}; set it to 1 or more.")
    ops = list(dict.fromkeys(operators))
    unknown = [op for op in ops if op not in OPERATORS]
    if unknown or not ops:
        raise ConfigError(
            f"data.source.operators: {list(operators)} has no valid operators {unknown or ''}; "
            f"choose among {list(OPERATORS)}."
        )
    if num_train < 1 or num_test < 0:
        raise ConfigError(
            f"data.source: num_train={num_train}, num_test={num_test}; need num_train >= 1 and num_test >= 0."
        )
    size = 10**digits
    total = len(ops) * size * size
    if num_train + num_test > total:
        raise ConfigError(
            f"data.source: {num_train} train + {num_test} test problems asked, but {digits}-digit operands "
            f"with operators {ops} give only {total} distinct problems; lower data.source.num_train, or "
            "raise data.source.digits or add operators."
        )
    drawn = random.Random(seed).sample(range(total), num_train + num_test)
    records = [_problem(index, ops, size, digits if zero_pad else 0, reverse_result) for index in drawn]
    return Splits(train=records[num_test:], test=records[:num_test])


def _problem(index: int, ops: list[str], size: int, width: int = 0, reverse: bool = False) -> Record:
    op = ops[index // (size * size)]
    a, b = divmod(index % (size * size), size)
    value = OPERATORS[op](a, b)
    prompt = f"{a:0{width}d}{op}{b:0{width}d}=" if width else f"{a}{op}{b}="
    result_width = (2 * width if op == "*" else width + 1) if width else 0
    return {"prompt": prompt, "completion": write_result(value, result_width, reverse), "answer": str(value)}


def write_result(value: int, width: int = 0, reverse: bool = False) -> str:
    """A result as a completion: zero-padded to ``width`` digits (0: no padding), the digits least
    significant first with ``reverse``, a minus sign in front."""
    digits = str(abs(value)).zfill(width)
    return ("-" if value < 0 else "") + (digits[::-1] if reverse else digits)
