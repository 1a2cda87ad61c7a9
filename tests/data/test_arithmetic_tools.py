"""arithmetic_tools' swapped replies: training conversations whose calculator reply cannot be
computed from the question (the model must read the tool), the problems and the held-out split
unchanged."""

from __future__ import annotations

import pytest

from toolbox.core.errors import ConfigError
from toolbox.data.sources.arithmetic_tools import arithmetic_tools, calculate, final_answer

SETTINGS = {"num_train": 400, "num_test": 50, "digits": 2, "fixed_width": True, "templates": 3}


def test_swapped_replies_change_a_quarter_of_the_training_replies_and_nothing_else():
    plain = arithmetic_tools(**SETTINGS)
    swapped = arithmetic_tools(**SETTINGS, swapped_replies=0.25)
    assert swapped.test == plain.test  # the held-out split: never swapped, the same records
    assert "tool_reply" not in plain.train[0]
    changed = 0
    for a, b in zip(plain.train, swapped.train, strict=True):
        assert (a["question"], a["expression"], a["answer"]) == (b["question"], b["expression"], b["answer"])
        assert b["answer"] == calculate(b["expression"])  # the problem's own answer is kept
        tool, final = b["messages"][2], b["messages"][3]
        assert tool["role"] == "tool" and tool["content"] == b["tool_reply"]
        assert final_answer(final["content"]) == b["tool_reply"]  # the last turn states the reply
        if b["tool_reply"] != b["answer"]:
            changed += 1
            # another problem's answer of the same operator: replies look like real ones
            op = next(c for c in b["expression"] if c in "+-*")
            same = {p["answer"] for p in plain.train if op in p["expression"]}
            assert b["tool_reply"] in same
        else:
            assert b["messages"] == a["messages"]
    assert changed == 100  # round(0.25 * 400): each drawn problem found another answer


def test_swapped_replies_are_seeded_and_bounded():
    first = arithmetic_tools(**SETTINGS, swapped_replies=0.5)
    assert arithmetic_tools(**SETTINGS, swapped_replies=0.5).train == first.train
    with pytest.raises(ConfigError, match=r"swapped_replies: 1.5; a fraction in 0..1"):
        arithmetic_tools(**SETTINGS, swapped_replies=1.5)
