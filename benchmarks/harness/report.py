"""The command-line flags every benchmark shares, and its one JSON object: settings, machine, load
before and after, the GEMM peak, every round's figures, min/median/max, ratios and the README row."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.flops import gemm_peak
from harness.machine import load, machine_facts
from harness.rounds import Rounds
from harness.settings import TorchSettings
from harness.sizes import SIZES

FORMAT = 1  # the JSON layout readme_rows.py reads


def common_arguments(parser: argparse.ArgumentParser, rounds: int = 3, sizes: bool = True) -> None:
    parser.add_argument("--rounds", type=int, default=rounds, help="alternating rounds of every side")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads, the same for every side"
    )
    if sizes:
        parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="the model size")
    parser.add_argument(
        "--no-deterministic",
        dest="deterministic",
        action="store_false",
        help="both sides without deterministic kernels",
    )
    parser.add_argument(
        "--nan-fill",
        action="store_true",
        help="both sides with torch's NaN fill of uninitialised memory (what deterministic mode used to add)",
    )
    parser.add_argument(
        "--out", help="also write the JSON here (benchmarks/results/<name>.json feeds the README)"
    )


def settings_from(args: argparse.Namespace) -> TorchSettings:
    return TorchSettings(
        threads=args.threads, deterministic=args.deterministic, fill_uninitialized_memory=args.nan_fill
    )


class Report:
    """Collects one benchmark's JSON; ``measure_peak()`` before and after the rounds."""

    def __init__(self, name: str, args: argparse.Namespace, settings: TorchSettings) -> None:
        self.args = args
        self.settings = settings
        settings.apply()
        self.data: dict = {
            "format": FORMAT,
            "benchmark": name,
            "command": " ".join(["python", f"benchmarks/{name}.py", *sys.argv[1:]]),
            "settings": settings.as_json(),
            "arguments": {k: v for k, v in vars(args).items() if k not in ("out", "settings")},
            "machine": machine_facts(),
            "load_before": load(),
        }
        self.peaks: list[float] = []

    def measure_peak(self) -> float:
        """This core's float32 GEMM rate now (FLOP/s); the report keeps the best of its calls."""
        self.settings.apply()
        peak = gemm_peak()["flop_per_s"]
        self.peaks.append(peak)
        return peak

    @property
    def peak(self) -> float:
        return max(self.peaks)

    def add(self, key: str, value) -> None:
        self.data[key] = value

    def finish(self, rounds: Rounds, ratios: dict[str, dict], row: dict | None = None) -> dict:
        self.data["load_after"] = load()
        if self.peaks:
            self.data["gemm_peak_flop_per_s"] = {"each": self.peaks, "best": self.peak}
        self.data["rounds"] = rounds.rounds
        self.data["orders"] = rounds.orders
        self.data["each_round"] = rounds.each
        self.data["sides"] = rounds.summary()
        self.data["ratios"] = ratios
        if row is not None:
            self.data["row"] = row
        text = json.dumps(self.data, indent=2) + "\n"
        if self.args.out:
            from toolbox.core.atomic import atomic_write_text

            Path(self.args.out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.args.out, text)
        print(text, end="")
        return self.data
