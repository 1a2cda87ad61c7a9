"""Code execution: passing and failing tests, time and memory limits, partial credit."""

from __future__ import annotations

import time

import pytest

from toolbox.core.registries import REWARDS
from toolbox.rewards.code_exec import extract_code, run_program

GOOD = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
BAD = "```python\ndef add(a, b):\n    return a - b\n```"
TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0"


def test_extract_code_takes_last_block():
    assert extract_code("```py\nx = 1\n```\ntext\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("z = 3") == "z = 3"


def test_pass_and_fail():
    reward = REWARDS.build({"name": "code_exec", "timeout": 5})
    assert reward(["p", "p", "p"], [GOOD, BAD, GOOD], tests=[TESTS, TESTS, None]) == [1.0, 0.0, None]


def test_partial_credit():
    reward = REWARDS.build({"name": "code_exec", "partial_credit": True})
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 0"]
    assert reward(["p"], [BAD], tests=[tests]) == [0.5]


def test_infinite_loop_is_killed_by_the_time_limit():
    start = time.monotonic()
    rc, why = run_program("while True:\n    pass\n", timeout=1.0)
    assert rc is None or rc != 0
    assert time.monotonic() - start < 10


def test_memory_limit_stops_a_large_allocation():
    rc, err = run_program("x = bytearray(2 * 1024 ** 3)\n", timeout=5.0, memory_mb=256)
    assert rc != 0 and "MemoryError" in err


def test_timeouts_are_counted():
    reward = REWARDS.build({"name": "code_exec", "timeout": 0.5})
    assert reward(["p"], ["import time\ntime.sleep(5)"], tests=["pass"]) == [0.0]
    assert reward.metrics()["timeouts"] == 1.0


def test_missing_field_raises_keyerror():
    with pytest.raises(KeyError, match="tests"):
        REWARDS.build({"name": "code_exec"})(["p"], [GOOD], answer=["1"])
