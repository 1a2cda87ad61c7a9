"""benchmarks/multiturn_rollouts.py at its tiny size on the harness: the sides generate the same model
tokens, every episode has its turns, the prefix cache spares the turns' re-prefill (and with it off
every turn prefills the whole conversation), and the JSON gives a README row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multiturn_rollouts  # noqa: E402
from harness.row import row  # noqa: E402


def medians(data: dict, side: str) -> dict:
    return {k: v["median"] for k, v in data["sides"][side].items()}


@pytest.mark.parametrize("cache", [None, 0])
def test_multiturn_and_single_turn_rollouts_of_the_same_length(tmp_path, cache):
    out = tmp_path / "mt.json"
    args = ["--size", "tiny", "--rounds", "2", "--out", str(out)]
    if cache is not None:
        args += ["--prefix-cache-gib", str(cache)]
    result = multiturn_rollouts.main(args)  # asserts the single side's length and the engine's count
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    assert data["settings"]["threads"] == 1 and data["orders"] == [
        ["waves", "async", "single"],
        ["async", "single", "waves"],
    ]
    waves, asynchronous, single = (medians(data, s) for s in ("waves", "async", "single"))
    assert data["warmup_episodes"]["episodes"] == 4 and data["warmup_episodes"]["cut_by_length"] == 0
    # the timed waves rollouts are the warm-up's episodes (the same seed); the single side makes their tokens
    assert waves["model_tokens"] == single["model_tokens"] == data["warmup_episodes"]["model_tokens"]
    assert waves["turns_mean"] == 3 and single["prompt_tokens"] == single["prefilled_tokens"]
    # turn 0 is one request per task (2), turns 1 and 2 one per episode (4 each)
    assert waves["prompt_tokens"] > 2 * single["prompt_tokens"]
    if cache == 0:
        assert waves["prefix_cache_hit_tokens"] == 0 and waves["prefilled_tokens"] == waves["prompt_tokens"]
        assert data["engine"]["prefix_cache_bytes"] == 0
    else:  # each later turn prefills only the reply's last token and the new user turn
        assert waves["prefilled_tokens"] < waves["prompt_tokens"] / 2
        assert asynchronous["prefix_cache_hit_tokens"] > 0
    ratio = data["ratios"]["vs_single"]
    assert ratio["min"] <= ratio["median"] <= ratio["max"] and len(ratio["each"]) == 2
    assert set(data["ratios"]) == {"vs_single", "vs_single_cpu", "async_vs_single"}
    text = row(data, out.name)  # (the command is this process's argv: pytest's, here)
    assert text.startswith("| `python benchmarks/multiturn_rollouts.py") and "single-turn rollouts" in text
    assert ("prefix cache off" in text) == (cache == 0)
