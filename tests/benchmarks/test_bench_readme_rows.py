"""The README's generated performance rows are `python benchmarks/readme_rows.py` of
benchmarks/results/*.json: a test holds the README to the files, and the rows carry the files'
numbers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import readme_rows  # noqa: E402
from harness.row import row  # noqa: E402


def result() -> dict:
    return {
        "format": 1,
        "command": "python benchmarks/sft_throughput.py --size tiny",
        "settings": {
            "threads": 1,
            "deterministic": True,
            "fill_uninitialized_memory": False,
            "dtype": "float32",
        },
        "rounds": 3,
        "load_before": [0.4, 0.3, 0.2],
        "load_after": [0.9, 0.5, 0.3],
        "gemm_peak_flop_per_s": {"best": 95.2e9},
        "sides": {
            "toolbox": {
                "tokens_per_s": {"min": 9000.0, "median": 10234.5, "max": 11000.0},
                "mfu": {"min": 0.6, "median": 0.69, "max": 0.7},
            },
            "hf": {
                "tokens_per_s": {"min": 4000.0, "median": 5000.0, "max": 6000.0},
                "mfu": {"min": 0.3, "median": 0.34, "max": 0.4},
            },
        },
        "ratios": {
            "vs_hf": {"min": 1.81, "median": 2.0469, "max": 2.2},
            "vs_hf_cpu": {"min": 1.9, "median": 2.1, "max": 2.3},
        },
        "row": {
            "title": "SFT, tiny",
            "figure": "tokens_per_s",
            "unit": "tok/s",
            "mfu": True,
            "peers": {"hf": "HF"},
            "goal": ">= 2x",
        },
    }


def test_a_row_carries_the_files_numbers():
    text = row(result(), "sft.json")
    assert "10,200 (9,000–11,000) tok/s, MFU 69 %" in text
    assert "HF 5,000 (4,000–6,000) tok/s, MFU 34 %" in text
    assert "2.05× HF (1.81–2.20), by CPU time 2.10×" in text
    assert (
        "median of 3 alternating rounds; load 0.4 → 0.9, GEMM peak 95 GFLOP/s; `benchmarks/results/sft.json`"
        in text
    )
    assert text.endswith("| >= 2x |\n")


def test_a_row_of_two_toolbox_sides_names_its_own_side():
    """benchmarks/grpo_async.py compares two of our modes (async vs sync): its row says which is 'ours'."""
    data = result()
    data["sides"] = {"async": data["sides"]["toolbox"], "hf": data["sides"]["hf"]}
    data["row"]["ours"] = "async"
    assert "| 10,200 (9,000–11,000) tok/s, MFU 69 % | HF 5,000" in row(data, "sft.json")


def test_check_fails_until_the_readme_is_regenerated(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "sft.json").write_text(json.dumps(result()))
    (results / "other.json").write_text(json.dumps({"not": "a harness file"}))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{readme_rows.BEGIN}old\n{readme_rows.END}after\n")
    args = ["--readme", str(readme), "--results", str(results)]
    assert readme_rows.main([*args, "--check"]) == 1
    assert readme_rows.main(args) == 0
    assert readme_rows.main([*args, "--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith("after\n") and "old" not in text
    assert text.count("| `python benchmarks/sft_throughput.py --size tiny`") == 1


def test_the_readme_matches_the_committed_results():
    assert readme_rows.main(["--check"]) == 0, "run python benchmarks/readme_rows.py"
