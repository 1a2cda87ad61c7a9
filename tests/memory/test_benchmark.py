"""benchmarks/memory.py, the source of the README's memory row, at a tiny size: one saved store per
size, reused by a second run with its build figures; every timed call answers what exact search
answers; memory_ab.py compares two versions of toolbox/ on a saved store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALE = [
    "scale",
    "--queries",
    "40",
    "--rounds",
    "1",
    "--ef",
    "64",
    "--exact-queries",
    "5",
    "--filter-queries",
    "5",
    "--chunk",
    "500",
    "--M",
    "8",
    "--ef-construction",
    "40",
]


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True, **kw
    )


def test_scale_builds_saved_stores_and_reuses_them(tmp_path):
    stores = [tmp_path / "s-600", tmp_path / "s-1200"]
    out = tmp_path / "scale.json"
    cmd = ["benchmarks/memory.py", *SCALE, "--sizes", "600", "1200", "--cache", *map(str, stores)]
    run([*cmd, "--add-n", "300", "--add-rounds", "2", "--out", str(out)])
    first = json.loads(out.read_text())
    add = first["add"]
    assert add["items_added"] == 300 and add["store_add_per_s"] > 0
    assert [r["store_first"] for r in add["rounds"]] == [True, False]  # alternating
    ratios = sorted(r["store_add_over_bare_add"] for r in add["rounds"])
    assert add["store_add_over_bare_add"] == pytest.approx(sum(ratios) / 2)  # the median of two
    for n, store in zip(("600", "1200"), stores, strict=True):
        row = first["sizes"][n]
        assert row["items_added"] == int(n) and Path(f"{store}.build.json").exists()
        [search] = row["search"]
        for name in ("bare", "index", "store", "store_sql"):  # the same graph, the same answers
            assert search[name]["recall_at_10"] == search["bare"]["recall_at_10"] > 0.9, name
        assert search["store_over_bare_p50"] > 0 and row["exact"]["recall_at_10"] == 1.0
        assert row["resident_rows"]["rows"] == int(n) and row["resident_rows"]["after"]["misses"] == 0
    run([*cmd, "--out", str(out)])  # reused: nothing added, the build's figures carried over
    again = json.loads(out.read_text())["sizes"]["1200"]
    assert again["cached_store"] == str(stores[1]) and "items_added" not in again
    assert again["build"]["store_add_per_s"] == first["sizes"]["1200"]["store_add_per_s"]
    assert (
        again["search"][0]["store"]["recall_at_10"]
        == first["sizes"]["1200"]["search"][0]["store"]["recall_at_10"]
    )


def test_memory_ab_runs_both_sides_on_a_saved_store(tmp_path):
    store = tmp_path / "s-500"
    run(["benchmarks/memory.py", *SCALE, "--sizes", "500", "--cache", str(store), "--build-only"])
    out = tmp_path / "ab.json"
    run(
        ["benchmarks/memory_ab.py", "--old", "HEAD", "--cache", str(store), "--ef", "32", "64"]
        + ["--rounds", "2", "--queries", "30", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert [r["order"] for r in result["rounds"]] == [["old", "new"], ["new", "old"]]
    for row in result["rounds"]:
        assert "memory-ab-" in row["old"]["toolbox"] and row["new"]["toolbox"] == str(ROOT / "toolbox")
    assert set(result["summary"]["new"]) == {"32", "64"} and len(result["summary"]["old"]["64"]) == 2
