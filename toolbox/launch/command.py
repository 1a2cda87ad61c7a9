"""``toolbox launch``: train through the configured launcher (local, torchrun, slurm), or a sweep.

::

    toolbox launch experiment=sft_arith launcher=torchrun strategy=ddp launcher.nproc=2
    toolbox launch experiment=sft_arith launcher=slurm --wait          # stream the job's log
    toolbox launch experiment=sft_arith launcher=slurm --sweep 'optimizer.lr=1e-3,3e-3' --sweep 'seed=0,1'

A SLURM launch without ``--wait`` prints the job id and log path and returns at once; with ``--wait``
it streams the log and exits with the job's status. ``--sweep KEY=V1,V2`` (repeatable: the cartesian
product) runs one training per combination in ``<run_dir>/sweep/NNN`` (``sweep.json`` lists them):
as one SLURM job array under ``launcher=slurm``, one after the other under the other launchers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any


def add_launch_parser(sub: Any, overrides_help: str) -> None:
    p = sub.add_parser(
        "launch", help="train through the configured launcher: local, torchrun or slurm (sweeps too)"
    )
    p.add_argument("overrides", nargs="*", help=overrides_help)
    p.add_argument("--config", help="a composed config.yaml (from `toolbox compose --out`)")
    p.add_argument("--data", help="the output folder of `toolbox data` (else the data are built in process)")
    p.add_argument("--out", help="run directory (overrides run_dir)")
    add_run_folder_flags(p)
    p.add_argument(
        "--wait", action="store_true", help="SLURM: wait for the job, streaming its log; exit with its status"
    )
    p.add_argument(
        "--sweep", action="append", default=[], metavar="KEY=V1,V2",
        help="train once per value (repeat for a grid); under launcher=slurm as one job array",
    )  # fmt: skip
    p.set_defaults(fn=cmd_launch)


def add_run_folder_flags(p: argparse.ArgumentParser) -> None:
    """What to do when the run folder holds a run of another configuration (default: refuse)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--new-folder", dest="run_folder", action="store_const", const="new", default="refuse",
        help="if the run folder holds another configuration's run, train into the next free <run_dir>-N",
    )  # fmt: skip
    group.add_argument(
        "--overwrite", dest="run_folder", action="store_const", const="overwrite",
        help="if the run folder holds another configuration's run, delete that run first",
    )  # fmt: skip


def claimed(args: argparse.Namespace, cfg):
    """``cfg`` with its run folder checked against the run already there (``run_folder.py``)."""
    from toolbox.experiment.run_folder import claim_run_folder

    return claim_run_folder(cfg, getattr(args, "run_folder", "refuse"))


def parse_sweep(specs: list[str]) -> list[list[str]]:
    """``["a=1,2", "b=x,y"]`` -> every combination as override lists (``[["a=1", "b=x"], ...]``)."""
    from toolbox.core.errors import ConfigError

    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key or not values:
            raise ConfigError(f"--sweep: expected KEY=V1,V2,..., got {spec!r}.")
        axes.append([f"{key}={v}" for v in values.split(",")])
    return [list(combo) for combo in itertools.product(*axes)]


def compose_args(args: argparse.Namespace, extra: list[str] | None = None):
    """The validated config of ``toolbox train`` / ``toolbox launch`` (overrides, ``--config``,
    ``--out``, ``--data``): the one compose-validate path of both."""
    from toolbox.experiment import compose_run

    return compose_run([*args.overrides, *(extra or [])], args.config, run_dir=args.out, data_dir=args.data)


def launch_config(args: argparse.Namespace) -> int:
    """``toolbox train``: compose, validate, run through the configured launcher (waiting for it)."""
    from toolbox.core.registries import LAUNCHERS

    cfg = claimed(args, compose_args(args))
    metrics = LAUNCHERS.build(cfg.launcher, "launcher").launch(cfg)
    if metrics is not None:
        print(json.dumps({"run_dir": str(cfg.run_dir), **metrics}))
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from toolbox.core.registries import LAUNCHERS
    from toolbox.launch import LaunchError

    def compose(extra: list[str]):
        return compose_args(args, extra)

    cfg = compose([])
    launcher = LAUNCHERS.build(cfg.launcher, "launcher")
    try:
        if args.sweep:
            return _sweep(args, cfg, compose, launcher)
        cfg = claimed(args, cfg)
        if hasattr(launcher, "submit") and not args.wait:
            job = launcher.submit(cfg)
            print(
                json.dumps(
                    {"run_dir": str(cfg.run_dir), "job_id": str(job.job_id), "log": str(job.paths.stdout)}
                )
            )
            return 0
        metrics = launcher.launch(cfg)
        print(json.dumps({"run_dir": str(cfg.run_dir), **(metrics or {})}))
        return 0
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code or 1


def _sweep(args: argparse.Namespace, base, compose, launcher) -> int:
    from toolbox.core.atomic import atomic_write_text
    from toolbox.launch import LaunchError

    combos = parse_sweep(args.sweep)
    root = Path(base.run_dir) / "sweep"
    cfgs = []
    for i, combo in enumerate(combos):
        cfg = compose(combo)  # validated
        cfg.run_dir = str(root / f"{i:03d}")
        cfgs.append(cfg)
    listing = [{"run_dir": str(c.run_dir), "overrides": combo} for c, combo in zip(cfgs, combos, strict=True)]
    atomic_write_text(root / "sweep.json", json.dumps(listing, indent=2) + "\n")
    if hasattr(launcher, "submit_sweep"):
        jobs = launcher.submit_sweep(cfgs)
        for job, item in zip(jobs, listing, strict=True):
            print(json.dumps({**item, "job_id": str(job.job_id), "log": str(job.paths.stdout)}), flush=True)
        if not args.wait:
            return 0
        status = 0
        for job, item in zip(jobs, listing, strict=True):
            try:
                result = launcher.wait(job, stream=False)
                print(json.dumps({**item, **result.get("metrics", {})}), flush=True)
            except LaunchError as e:
                print(f"error: {e}", file=sys.stderr)
                status = status or e.exit_code or 1
        return status
    for cfg, item in zip(cfgs, listing, strict=True):
        metrics = launcher.launch(cfg)
        print(json.dumps({**item, **(metrics or {})}), flush=True)
    return 0
