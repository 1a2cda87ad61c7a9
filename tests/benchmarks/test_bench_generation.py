"""benchmarks/generation.py on the harness: a tiny run writes the settings, every batch size's
figures and ratios and the greedy check; its README row carries them, a batch size per column
group; a mismatch of greedy ids is named in the JSON and in the row."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.conftest import FAIR_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from generation import GreedyCheck  # noqa: E402
from harness.row import row, spread_text  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("generation") / "generation_tiny.json"
    cmd = [
        sys.executable,
        "benchmarks/generation.py",
        *("--size", "tiny", "--rounds", "1", "--new-tokens", "4", "--repeats", "1"),
        *("--out", str(out)),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert json.loads(done.stdout) == data  # the same object printed and written
    return data


def test_a_tiny_run_writes_every_batch_size_under_the_harness_settings(tiny_run):
    data = tiny_run
    assert data["format"] == 1 and data["benchmark"] == "generation"
    assert data["command"].startswith("python benchmarks/generation.py --size tiny --rounds 1")
    assert data["settings"] == FAIR_SETTINGS
    assert data["model"] == {
        "name": "tiny_llama",
        "size": "tiny",
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 2,
        "intermediate_size": 256,
        "vocab_size": 52,
        "parameters": 134720,
    }
    assert data["work"]["batch_sizes"] == [1, 8, 32] and data["work"]["new_tokens"] == 4
    assert data["rounds"] == 1 and data["orders"] == [["toolbox", "hf"]]
    assert len(data["load_before"]) == 3 and len(data["load_after"]) == 3
    assert data["greedy_ids_match"] == {"1": True, "8": True, "32": True}
    assert data["greedy_ids_match_all"] is True and "greedy_ids_differ" not in data
    # every prompt token was prefilled: repeated prompts are never served from the prefix cache
    assert data["engine"]["stats"]["prefix_cache_hit_tokens"] == 0
    assert data["engine"]["stats"]["prompt_tokens"] == 2 * (1 + 8 + 32) * 16  # warm-up + one round
    assert data["goal"]["issue_35"] == (
        ">= 2x HF generate at batch 1/8/32 on the standard 512-wide model, >= 1.5x on the 85M model, "
        "greedy ids equal"
    )
    assert data["goal"]["ratio"] is None and data["goal"]["met"] is None  # no goal at the tiny size
    for b in (1, 8, 32):
        for side in ("toolbox", "hf"):
            for figure in ("tokens_per_s", "tokens_per_cpu_s"):
                s = data["sides"][side][f"batch_{b}_{figure}"]
                assert len(s["each"]) == 1 and s["min"] == s["median"] == s["max"] > 0
        for suffix, figure in (("", "tokens_per_s"), ("_cpu", "tokens_per_cpu_s")):
            ratio = data["ratios"][f"vs_hf_batch_{b}{suffix}"]
            ours = data["sides"]["toolbox"][f"batch_{b}_{figure}"]["median"]
            hf = data["sides"]["hf"][f"batch_{b}_{figure}"]["median"]
            assert ratio["each"] == [ours / hf]  # from the unrounded figures


def test_the_row_of_a_tiny_run_carries_each_batch_size(tiny_run):
    data = tiny_run
    text = row(data, "generation_tiny.json")
    cells = text.split(" | ")
    assert cells[0].startswith("| `python benchmarks/generation.py --size tiny --rounds 1")
    assert (
        "(greedy generation, torch engine vs HF `generate`, tiny model, batch 1/8/32, 16-token prompts, "
        "4 new tokens, a round's figure the median of 1 generations; 1 thread(s), deterministic kernels, "
        "float32; median of 1 alternating rounds; load "
    ) in cells[0]
    assert cells[0].endswith("`benchmarks/results/generation_tiny.json`)")
    sides = data["sides"]

    def figures(side):
        return " / ".join(spread_text(sides[side][f"batch_{b}_tokens_per_s"]) for b in (1, 8, 32))

    assert cells[1] == f"batch 1 / 8 / 32: {figures('toolbox')} tok/s"
    assert cells[2] == f"HF generate {figures('hf')} tok/s"
    wall = [data["ratios"][f"vs_hf_batch_{b}"]["median"] for b in (1, 8, 32)]
    cpu = [data["ratios"][f"vs_hf_batch_{b}_cpu"]["median"] for b in (1, 8, 32)]
    assert cells[3] == (
        " / ".join(f"{x:.2f}× ({x:.2f}–{x:.2f})" for x in wall)
        + " HF generate, by CPU time "
        + " / ".join(f"{x:.2f}×" for x in cpu)
        + "; greedy ids equal at every batch"
    )
    assert cells[4] == "none at this size (512: >= 2x HF generate, 85m: >= 1.5x; greedy ids equal) |\n"


def test_a_row_with_pinned_numbers_and_a_greedy_mismatch(tiny_run):
    data = copy.deepcopy(tiny_run)
    for side, scale in (("toolbox", 2.0), ("hf", 1.0)):
        for b in (1, 8, 32):
            data["sides"][side][f"batch_{b}_tokens_per_s"] = {
                "min": 900.0 * b * scale,
                "median": 1000.0 * b * scale,
                "max": 1234.5 * b * scale,
            }
    ratios = {1: (1.9, 2.0, 2.1, 2.1), 8: (2.25, 2.345, 2.5, 2.4449), 32: (1.5, 1.6, 1.7, 1.7)}
    for b, (low, mid, high, cpu) in ratios.items():
        data["ratios"][f"vs_hf_batch_{b}"] = {"min": low, "median": mid, "max": high}
        data["ratios"][f"vs_hf_batch_{b}_cpu"] = {"min": low, "median": cpu, "max": high}
    data["greedy_ids_match"]["32"] = False
    cells = row(data, "generation_512.json").split(" | ")
    assert (
        cells[1]
        == "batch 1 / 8 / 32: 2,000 (1,800–2,470) / 16,000 (14,400–19,800) / 64,000 (57,600–79,000) tok/s"
    )
    assert cells[2] == "HF generate 1,000 (900–1,230) / 8,000 (7,200–9,880) / 32,000 (28,800–39,500) tok/s"
    assert cells[3] == (
        "2.00× (1.90–2.10) / 2.35× (2.25–2.50) / 1.60× (1.50–1.70) HF generate, by CPU time "
        "2.10× / 2.44× / 1.70×; **greedy ids differ at batch 32**"
    )


def test_the_greedy_check_names_the_first_difference():
    check = GreedyCheck()
    check.see(8, "hf", [[1, 2, 3], [4, 5, 6]])
    check.see(8, "toolbox", [[1, 2, 3], [4, 5, 6]])
    check.see(1, "hf", [[7, 8]])
    check.see(1, "toolbox", [[7, 8]])
    assert check.as_json() == ({"8": True, "1": True}, {})
    check.see(8, "toolbox", [[1, 2, 9], [4, 0, 6]])
    check.see(8, "hf", [[0, 0, 0], [0, 0, 0]])  # only the first difference is kept
    assert check.as_json() == (
        {"8": False, "1": True},
        {"8": {"side": "toolbox", "sequences_differing": 2, "of": 2, "first_differing_position": 1}},
    )
