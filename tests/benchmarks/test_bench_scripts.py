"""The ported benchmark scripts run at tiny settings and write the harness's JSON (slow: each
trains a few steps of every side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.conftest import FAIR_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness.row import row  # noqa: E402

pytestmark = pytest.mark.slow

TINY = {
    "sft_throughput": ["--steps", "3", "--warmup", "1", "--peers", "hf_trainer"],
    "dpo_vs_trl": ["--steps", "3", "--warmup", "1"],
    "grpo_vs_trl": ["--steps", "2", "--warmup", "1", "--prompts", "2", "--generations", "2", "--length", "4"],
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_script_writes_both_sides_under_the_same_settings(name, tmp_path):
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, f"benchmarks/{name}.py", *TINY[name], "--rounds", "2", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=1200)
    data = json.loads(out.read_text())
    assert data["settings"] == FAIR_SETTINGS
    assert len(data["orders"]) == 2 and data["orders"][0] == list(reversed(data["orders"][1]))
    assert len(data["load_before"]) == 3 and len(data["load_after"]) == 3
    ratio = data["ratios"][next(iter(data["ratios"]))]
    assert ratio["min"] <= ratio["median"] <= ratio["max"] and len(ratio["each"]) == 2
    for side in data["sides"].values():
        assert side["sec_per_step"]["median"] > 0 and side["cpu_sec_per_step"]["median"] > 0
        if "mfu" in side:
            assert 0 < side["mfu"]["median"] < 1
    assert row(data, out.name).startswith(f"| `python benchmarks/{name}.py")
