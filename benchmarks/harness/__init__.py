"""What every benchmark shares: the process-wide torch settings both sides run under, alternating
rounds with min/median/max figures and ratios from unrounded values, wall and CPU clocks, the
machine's load, the GEMM peak that MFU is measured against, and the two model sizes.

A script runs as ``python benchmarks/<name>.py``, so ``benchmarks/`` is on its path and it imports
``from harness import ...``.
"""

from harness.clock import StepClock
from harness.flops import gemm_peak, mfu, model_flop_params
from harness.machine import machine_facts
from harness.report import Report, common_arguments
from harness.rounds import Rounds, spread
from harness.settings import TorchSettings
from harness.sizes import SIZES, Size

__all__ = [
    "SIZES",
    "Report",
    "Rounds",
    "Size",
    "StepClock",
    "TorchSettings",
    "common_arguments",
    "gemm_peak",
    "machine_facts",
    "mfu",
    "model_flop_params",
    "spread",
]
