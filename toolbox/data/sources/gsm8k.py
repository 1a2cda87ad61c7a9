"""GSM8K grade-school math problems from a local jsonl file (``question``, ``answer``)."""

from __future__ import annotations

from pathlib import Path

from toolbox.core.bounds import NonNegativeInt
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits
from toolbox.data.sources.files import iter_jsonl
from toolbox.data.sources.holdout import hold_out

FINAL = "#### "


@SOURCES.register("gsm8k")
def gsm8k(
    path: str = "../shared/data/gsm8k/train.jsonl", num_test: NonNegativeInt = 500, seed: int = 0
) -> Splits:
    """GSM8K as records {prompt, completion, answer}, with a seeded held-out test split.

    The prompt is the question followed by ``"\\nAnswer: "``; the completion is the full worked
    answer (ending in ``#### <number>``); ``answer`` is that final number without thousands
    separators (``"1,000"`` becomes ``"1000"``), for exact-match rewards.

    Args:
        path: the jsonl file of openai/grade-school-math (relative paths start at the working folder).
        num_test: problems held out as the test split.
        seed: seed of the held-out draw.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(
            f"data.source.path: {file.resolve()} does not exist; point it at GSM8K's train.jsonl "
            '(lines of {"question": ..., "answer": "... #### 42"}).'
        )
    records = [_record(file, number, raw) for number, raw in iter_jsonl(file)]
    train, test = hold_out(records, num_test, seed, "data.source.num_test")
    return Splits(train=train, test=test)


def _record(file: Path, number: int, raw: Record) -> Record:
    question, answer = raw.get("question"), raw.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str) or FINAL not in answer:
        raise DataError(
            f'{file}:{number}: expected {{"question": str, "answer": str ending in \'#### <number>\'}}, '
            f"got keys {sorted(raw)}; fix or delete that line."
        )
    final = answer.rsplit(FINAL, 1)[1].strip().replace(",", "")
    return {"prompt": question + "\nAnswer: ", "completion": answer, "answer": final}
