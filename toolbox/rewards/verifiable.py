"""Verifiable rewards: the answer checked against a reference, or the output against a format.

``numeric_match`` reads a number out of the completion and compares it with the sample's reference
(field ``answer`` by default). The completion's answer is, in order of preference: the number after
``####`` (GSM8K), inside the last ``\\boxed{...}``, after "answer is" / "answer:", else the last number
of the text (``mode=last_number``) or the whole text (``mode=strict``). Both sides are normalised:
thousands separators, ``$``, ``%``, trailing units and a trailing period go; ``1/2``, ``0.50``
and ``.5`` are numbers; values compare within ``tolerance``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.base import Reward

NUMBER_RE = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+(?:\.\d+)?)?")
HASHES_RE = re.compile(r"####\s*([^\n]*)")
ANSWER_IS_RE = re.compile(r"answer\s*(?:is|:|=)\s*([^\n]*)", re.IGNORECASE)


def _boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def parse_number(text: str) -> Fraction | None:
    """The number ``text`` is, after normalisation; None when it is not (only) a number.

    ``"1,234"`` → 1234, ``"$5.50"`` → 11/2, ``"72 apples."`` → 72, ``"\\frac{1}{2}"`` → 1/2,
    ``"50%"`` → 50.
    """
    s = text.strip()
    s = re.sub(r"\\(?:text|mathrm|mbox)\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\d?frac\{([^}]*)\}\{([^}]*)\}", r"(\1)/(\2)", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "").replace("−", "-")
    s = s.replace("\\!", "").replace("\\,", "").replace("{", "").replace("}", "")
    s = s.strip().rstrip(".").strip()
    m = NUMBER_RE.match(s.replace("(", "").replace(")", ""))
    if not m:
        return None
    rest = s.replace("(", "").replace(")", "")[m.end() :].strip()
    if rest and not re.fullmatch(r"[A-Za-z][A-Za-z\s.]*", rest):  # only unit words may follow
        return None
    return _to_fraction(m.group(0))


def _to_fraction(token: str) -> Fraction | None:
    token = token.replace(",", "").replace(" ", "").replace("−", "-")
    try:
        if "/" in token:
            num, den = token.split("/")
            return Fraction(num) / Fraction(den)
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def extract_answer(text: str, mode: Literal["last_number", "strict"] = "last_number") -> Fraction | None:
    """The completion's numeric answer (see the module docstring for the order of preference)."""
    for found in (
        HASHES_RE.findall(text)[-1:],
        [_boxed(text)] if _boxed(text) is not None else [],
        ANSWER_IS_RE.findall(text)[-1:],
    ):
        if found:
            value = parse_number(found[0])
            if value is None:  # "#### the answer is 5": fall back to the last number of that span
                numbers = NUMBER_RE.findall(found[0])
                value = _to_fraction(numbers[-1]) if numbers else None
            return value
    if mode == "strict":
        return parse_number(text)
    numbers = NUMBER_RE.findall(text)
    return _to_fraction(numbers[-1]) if numbers else None


def reference_number(reference: Any) -> Fraction | None:
    """A reference answer as a number: ints and floats as they are, text as ``extract_answer`` reads it."""
    if reference is None or isinstance(reference, bool):
        return None
    if isinstance(reference, int | float):
        return Fraction(reference)
    value = extract_answer(str(reference), "strict")
    return value if value is not None else extract_answer(str(reference))


@REWARDS.register("numeric_match")
class NumericMatch(Reward):
    """1.0 when the completion's numeric answer equals the reference, else 0.0 (None: no reference).

    Args:
        answer_field: the sample field holding the reference (a number, or text such as "#### 72").
        mode: last_number (fall back to the last number of the completion) or strict (the whole
            completion, after normalisation, must be the number).
        tolerance: absolute tolerance of the comparison.
        correct: reward of a right answer.
        wrong: reward of a wrong or missing answer.
    """

    def __init__(
        self,
        answer_field: str = "answer",
        mode: Literal["last_number", "strict"] = "last_number",
        tolerance: float = 1e-6,
        correct: float = 1.0,
        wrong: float = 0.0,
    ) -> None:
        self.answer_field = answer_field
        self.mode = mode
        self.tolerance = tolerance
        self.correct = correct
        self.wrong = wrong

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        if self.answer_field not in fields:
            raise KeyError(
                f"numeric_match needs the field '{self.answer_field}'; the samples have {sorted(fields)}"
            )
        out: list[float | None] = []
        refs: dict[Any, Fraction | None] = {}  # a group's completions share their prompt's reference
        for completion, reference in zip(completions, fields[self.answer_field], strict=True):
            key = (type(reference), reference) if isinstance(reference, str | int | float) else None
            if key is None:
                ref = reference_number(reference)
            elif key in refs:
                ref = refs[key]
            else:
                ref = refs[key] = reference_number(reference)
            if ref is None:
                out.append(None)
                continue
            got = extract_answer(completion, self.mode)
            ok = got is not None and abs(float(got - ref)) <= self.tolerance
            out.append(self.correct if ok else self.wrong)
        return out


@REWARDS.register("format_regex")
class FormatRegex(Reward):
    """1.0 when the completion matches a regular expression, else 0.0.

    Args:
        pattern: the regular expression (Python ``re`` syntax).
        full_match: the whole completion (stripped) must match; otherwise a match anywhere counts.
        dotall: ``.`` matches newlines too.
        reward: the score of a match (a miss scores 0).
    """

    def __init__(
        self, pattern: str, full_match: bool = True, dotall: bool = True, reward: float = 1.0
    ) -> None:
        try:
            self.regex = re.compile(pattern, re.DOTALL if dotall else 0)
        except re.error as e:
            raise ConfigError(
                f"reward.pattern: {pattern!r} is not a valid regular expression ({e})."
            ) from None
        self.full_match = full_match
        self.reward = reward

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        match = self.regex.fullmatch if self.full_match else self.regex.search
        return [self.reward if match(c.strip() if self.full_match else c) else 0.0 for c in completions]


@REWARDS.register("exact_string")
class ExactString(Reward):
    """1.0 when the completion equals the reference string (after stripping), else 0.0.

    Args:
        answer_field: the sample field holding the reference.
        case_sensitive: compare case as well.
        strip_period: ignore one trailing period on either side.
    """

    def __init__(
        self, answer_field: str = "answer", case_sensitive: bool = True, strip_period: bool = False
    ) -> None:
        self.answer_field = answer_field
        self.case_sensitive = case_sensitive
        self.strip_period = strip_period

    def _norm(self, s: Any) -> str:
        s = str(s).strip()
        if self.strip_period:
            s = s.removesuffix(".").strip()
        return s if self.case_sensitive else s.casefold()

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        if self.answer_field not in fields:
            raise KeyError(
                f"exact_string needs the field '{self.answer_field}'; the samples have {sorted(fields)}"
            )
        return [
            None if ref is None else float(self._norm(c) == self._norm(ref))
            for c, ref in zip(completions, fields[self.answer_field], strict=True)
        ]
