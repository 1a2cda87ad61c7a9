"""``toolbox plan --estimate experiment=NAME [KEY=VALUE ...]``: an experiment estimated as a run is.

An experiment that is not a run of ``config/config.yaml`` (``dpo_arith``) has no train stage of the
workflow to calibrate, so its folder is laid out as a run's: the config ``toolbox train
experiment=NAME KEY=VALUE ...`` composes is written as ``work/NAME/config/train.yaml`` (and
``data.yaml``, the same file: ``toolbox data --config`` reads its data section), its data are built
with ``toolbox data`` into ``work/NAME/data`` (again only when the config changed), and the train
stage is calibrated from there (toolbox/results/estimate.py). The estimate lands in
``work/NAME/estimate/train.json``; ``toolbox launch --config work/NAME/config/train.yaml --data
work/NAME/data launcher.name=slurm`` then asks SLURM for it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from toolbox.core.errors import ConfigError, ToolboxError


def split_targets(targets: list[str]) -> tuple[list[str], list[str]]:
    """Snakemake targets, and the ``KEY=VALUE`` overrides composing one experiment (none: [])."""
    overrides = [t for t in targets if "=" in t]
    if overrides and not any(o.startswith("experiment=") for o in overrides):
        raise ConfigError(
            f"toolbox plan: {overrides[0]!r} is an override, but no experiment=NAME names the "
            "experiment it changes; e.g. `toolbox plan --estimate experiment=dpo_arith`."
        )
    return [t for t in targets if "=" not in t], overrides


def prepare(root: Path, overrides: list[str], runs: dict) -> str:
    """Write the experiment's config and build its data under ``work/NAME``; returns NAME."""
    from omegaconf import OmegaConf

    from toolbox.core.atomic import atomic_write_text
    from toolbox.experiment import compose_run
    from toolbox.results.estimate import _toolbox

    name = [o for o in overrides if o.startswith("experiment=")][-1].split("=", 1)[1]
    if name in runs:
        raise ConfigError(
            f"toolbox plan --estimate experiment={name}: config/config.yaml has a run named {name}; "
            f"estimate that run with `toolbox plan --estimate results/{name}/`."
        )
    text = OmegaConf.to_yaml(compose_run(overrides), resolve=True)  # as `toolbox compose --out` writes it
    run = root / "work" / name
    config, data = run / "config", run / "data"
    slices = [config / "train.yaml", config / "data.yaml"]
    if any(not path.is_file() or path.read_text() != text for path in slices):  # new, or another config
        for path in slices:
            atomic_write_text(path, text)
        shutil.rmtree(data, ignore_errors=True)
    if not data.is_dir():
        done = subprocess.run(
            [*_toolbox(), "data", "--config", str(config / "data.yaml"), "--out", str(data)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise ToolboxError(
                f"toolbox plan --estimate experiment={name}: building the data failed:\n{done.stderr[-3000:]}"
            )
    return name
