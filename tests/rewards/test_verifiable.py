"""Verifiable rewards: numeric answers with normalisation, format regex, exact strings."""

from __future__ import annotations

from fractions import Fraction

import pytest

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.verifiable import extract_answer, parse_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The total is #### 1,234", 1234),
        ("so we get \\boxed{42}.", 42),
        ("\\boxed{\\frac{1}{2}}", Fraction(1, 2)),
        ("The answer is $5.50.", Fraction(11, 2)),
        ("Answer: 72 apples.", 72),
        ("first 3, then 4, finally 18", 18),
        ("#### -7", -7),
        ("she has 50% left, #### 50%", 50),
        ("#### 3/4", Fraction(3, 4)),
        ("answer: .5", Fraction(1, 2)),
        ("#### 1,000,000 dollars", 1000000),
        ("no digits here", None),
    ],
)
def test_extract_answer(text, value):
    got = extract_answer(text)
    assert got == (Fraction(value) if value is not None else None)


def test_parse_number_rejects_non_numbers():
    assert parse_number("12 apples") == 12
    assert parse_number("12 + 3") is None
    assert parse_number("abc") is None


def _numeric(**kw):
    return REWARDS.build({"name": "numeric_match", **kw})


def test_numeric_match_scores_and_normalises_references():
    reward = _numeric()
    completions = ["#### 1,234", "\\boxed{1234.0}", "it is 1235", "1234.", "nothing", "12 + 3 = 15"]
    answers = ["1234", "#### 1,234", 1234, "1234", "1234", 15]
    assert reward(["q"] * 6, completions, answer=answers) == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_numeric_match_strict_mode_and_missing_reference():
    reward = _numeric(mode="strict")
    assert reward(["q", "q", "q"], ["42", "it is 42", "42"], answer=["42", "42", None]) == [1.0, 0.0, None]
    with pytest.raises(KeyError, match="answer"):
        reward(["q"], ["1"], solution=["1"])


def test_format_regex():
    reward = REWARDS.build({"name": "format_regex", "pattern": r"<think>.*</think>\s*\d+"})
    assert reward(["q"] * 3, ["<think>a\nb</think> 12", "12", " <think></think>7 "]) == [1.0, 0.0, 1.0]
    search = REWARDS.build({"name": "format_regex", "pattern": r"\d", "full_match": False, "reward": 0.5})
    assert search(["q", "q"], ["x1y", "xy"]) == [0.5, 0.0]
    with pytest.raises(ConfigError, match="regular expression"):
        REWARDS.build({"name": "format_regex", "pattern": "("})


def test_exact_string():
    reward = REWARDS.build({"name": "exact_string", "case_sensitive": False, "strip_period": True})
    assert reward(["q"] * 3, [" Paris.", "paris", "Lyon"], answer=["Paris", "PARIS.", "Paris"]) == [
        1.0,
        1.0,
        0.0,
    ]
