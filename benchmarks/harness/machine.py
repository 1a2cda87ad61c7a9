"""What the machine was doing: cores, CPU model, load averages, library versions."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load() -> list[float]:
    """The 1, 5 and 15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_facts() -> dict:
    import torch

    facts = {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for name in ("transformers", "trl", "peft"):
        try:
            facts[name] = __import__(name).__version__
        except ImportError:
            pass
    return facts
