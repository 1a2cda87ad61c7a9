"""benchmarks/multiturn_rollouts.py at a tiny size: both sides generate the same model tokens, every
episode has its turns, and the JSON it writes holds the rates and their ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multiturn_rollouts  # noqa: E402


def test_multiturn_and_single_turn_rollouts_of_the_same_length(tmp_path):
    out = tmp_path / "mt.json"
    args = ["--episodes", "4", "--turns", "3", "--reply-tokens", "6", "--repeats", "1", "--threads", "1"]
    result = multiturn_rollouts.main([*args, "--out", str(out)])  # asserts the single side's length
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (run,) = result["runs"]
    assert run["cut_by_length"] == 0 and run["turns_mean"] == 3 and run["env_tokens"] > 0
    rates = result["tokens_per_s"]
    assert set(rates) == {"waves", "async", "single"} and min(rates.values()) > 0
    # the rates are rounded to 0.1 token/s in the JSON
    assert abs(result["ratio_waves_over_single"] - rates["waves"] / rates["single"]) < 0.01
    assert abs(result["ratio_async_over_single"] - rates["async"] / rates["single"]) < 0.01
