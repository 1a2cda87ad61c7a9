"""One process of a launched run: ``python -m toolbox.launch.worker CONFIG [--result FILE]``.

The torchrun and SLURM launchers write the composed config to a file and start this module in
every process; each process builds the experiment from the same file (its rank and world size come
from the environment) and trains. Rank 0 writes the result (final metrics, steps, world size, the
step it resumed from) as JSON, which the launcher reads back.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """Build and fit ``cfg`` in this process; the result as rank 0 reports it."""
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder

    # the launcher's command validated this config and gave its warnings; each rank re-checks only
    parts = ExperimentBuilder.from_config(cfg, warn=False).build()
    resumed: list[int | None] = [None]
    parts.trainer.bus.subscribe(
        Event.FIT_START, lambda d: resumed.__setitem__(0, d.payload.get("resumed_from"))
    )
    try:
        metrics = parts.trainer.fit()
    finally:
        parts.strategy.teardown()
    return {
        "run_dir": str(cfg.run_dir),
        "metrics": {k: float(v) for k, v in (metrics or {}).items()},
        "step": parts.trainer.step,
        "world_size": parts.context.world_size,
        "strategy": str(cfg.strategy.name),
        "backend": getattr(parts.strategy, "backend", None),
        "device": str(parts.context.device),
        "resumed_from": resumed[0],
        "is_main": parts.context.is_main,
    }


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    from toolbox.core.atomic import atomic_write_text

    atomic_write_text(
        Path(path), json.dumps({k: v for k, v in result.items() if k != "is_main"}, indent=2) + "\n"
    )


def read_result(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    parser = argparse.ArgumentParser(prog="python -m toolbox.launch.worker", description=__doc__)
    parser.add_argument("config", help="a composed config.yaml")
    parser.add_argument("--result", help="rank 0 writes the result JSON here")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied on top of the file")
    args = parser.parse_args(argv)

    @record  # a failing rank's traceback goes into torchrun's error summary
    def _run() -> None:
        cfg = OmegaConf.merge(OmegaConf.load(args.config), OmegaConf.from_dotlist(args.overrides))
        result = run_config(cfg)
        if result["is_main"] and args.result:
            write_result(args.result, result)

    _run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
