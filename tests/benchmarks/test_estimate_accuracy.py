"""benchmarks/estimate_accuracy.py: the predicted-vs-measured table comes from the files, not by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import estimate_accuracy  # noqa: E402

BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _run(root: Path, run: str, wall_s: float, peak_mb: float, got_s: float, got_mb: float) -> None:
    (root / "work" / run / "estimate").mkdir(parents=True)
    (root / "work" / run / "benchmarks").mkdir(parents=True)
    record = {"wall_s": wall_s, "peak_mb": peak_mb, "slurm": {"runtime": 2, "mem_mb": 700}}
    (root / "work" / run / "estimate" / "train.json").write_text(json.dumps(record))
    (root / "work" / run / "benchmarks" / "train.tsv").write_text(
        BENCH_HEADER + f"{got_s}\t0:01:40\t{got_mb}\t900\t400\t400\t0\t0\t90\t95\n"
    )


def test_rows_are_computed_from_the_estimate_and_the_benchmark(tmp_path: Path) -> None:
    _run(tmp_path, "good", wall_s=110, peak_mb=500, got_s=100, got_mb=520)
    _run(tmp_path, "slow", wall_s=60, peak_mb=500, got_s=200, got_mb=500)
    (tmp_path / "work" / "none").mkdir(parents=True)
    rows = estimate_accuracy.table(tmp_path, ["good", "slow", "none"], "note").splitlines()
    assert rows[0].endswith("note")
    assert rows[4] == (
        "| good | 110 s | 100 s | +10% | 500 MB | 520 MB | -4% | within the bounds; "
        "--time=2 --mem=700M holds the run |"
    )
    # 60 s predicted for 200 s measured: -70 %, and the 2-minute limit would have killed it
    assert "| -70% |" in rows[5] and "outside the bounds" in rows[5] and "does not hold" in rows[5]
    assert (
        rows[6]
        == "| none | – | – | – | – | – | – | not measured: no work/none/estimate/train.json, work/none/benchmarks/train.tsv |"
    )


def test_the_table_replaces_what_is_between_the_markers(tmp_path: Path) -> None:
    _run(tmp_path, "good", wall_s=110, peak_mb=500, got_s=100, got_mb=520)
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{estimate_accuracy.BEGIN}\nold table\n{estimate_accuracy.END}\nafter\n")
    estimate_accuracy.main(["--root", str(tmp_path), "--doc", str(doc), "good"])
    text = doc.read_text()
    assert "old table" not in text and "| good | 110 s | 100 s | +10% |" in text
    assert text.startswith("before\n") and text.endswith(f"{estimate_accuracy.END}\nafter\n")
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="has no marker lines"):
        estimate_accuracy.main(["--root", str(tmp_path), "--doc", str(tmp_path / "plain.md"), "good"])


def test_measure_records_the_train_command_of_an_estimated_experiment(tmp_path: Path, monkeypatch) -> None:
    import toolbox.results.estimate as estimate

    ran = []

    def timed(cmd, log):
        ran.append(cmd)
        return 100.0, 520.0

    monkeypatch.setattr(estimate, "_timed", timed)
    _run(tmp_path, "exp", wall_s=110, peak_mb=500, got_s=1, got_mb=1)
    assert estimate_accuracy.main(["--root", str(tmp_path), "--measure", "exp"]) == 0
    work = tmp_path / "work" / "exp"
    assert ran[0][-6:] == ["--config", str(work / "config" / "train.yaml"), "--data", str(work / "data"),
                           "--out", str(work / "train")]  # fmt: skip
    assert (
        work / "benchmarks" / "train.tsv"
    ).read_text() == "s\tmax_rss\tmeasured_by\n100.00\t520.00\twait4\n"
    row = estimate_accuracy.table(tmp_path, ["exp"], "").splitlines()[4]
    assert row.startswith("| exp | 110 s | 100 s | +10% | 500 MB | 520 MB | -4% | within the bounds"), row
