"""Cut a run's composed config into one config per stage, so that a stage reruns only when what it
reads changes.

    python workflow/scripts/slice_config.py work/demo/config/full.yaml \
        --defaults work/_defaults/config.yaml --out-dir work/demo/config

writes ``data.yaml``, ``train.yaml`` and ``eval.yaml`` next to ``full.yaml``. Each is a FULL config
that the toolbox command of its stage accepts (``--config``): the sections the stage reads are
the run's own, every other section is normalised to the toolbox defaults
(``toolbox compose`` with no overrides). An eval-only change therefore changes ``eval.yaml``
alone, and only eval (and publish) rerun; a data change changes all three.

=====  =====================================================================================
stage  sections taken from the run (the rest: the defaults)
=====  =====================================================================================
data   seed, data, tokenizer                                     (+ run_dir)
train  everything but ``eval`` and ``resume_from`` (in-training evaluation runs the default
       evaluators; the workflow's eval stage runs the run's own), but ``eval`` too for a run whose
       callbacks select the model or the stopping step by eval metrics (``best_model``,
       ``early_stopping``: its monitor may be a metric only the run's own evaluators give)
eval   seed, device, deterministic, data, objective, precision, strategy, engine, eval, env
       (+ run_dir; model and tokenizer are the trained model's, data.source the data stage's)
       An environment run (``env:`` set, or ``trainer.env:``: agent_grpo's text environment)
       trains with ``eval: null``: the default evaluators score held-out data it has none of (a
       gym run has no records; a text environment's are prompt-only tasks, no reference
       completion); its eval stage plays the run's own episodes.
=====  =====================================================================================

Only PyYAML is imported (no toolbox, no torch): it takes a few tens of milliseconds. Each file is
written atomically and only when its content changed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

ALL = object()
# stage -> top-level keys kept from the run's config (ALL: every key but those in EXCLUDE)
KEEP: dict[str, Any] = {
    "data": ("run_dir", "seed", "data", "tokenizer"),
    "train": ALL,
    "eval": (
        "run_dir",
        "seed",
        "device",
        "deterministic",
        "data",
        "objective",
        "precision",
        "strategy",
        "engine",
        "eval",
        "env",
    ),
}
EXCLUDE = {"train": ("eval", "resume_from")}
# callbacks that choose the model by the evaluators' metrics (test accuracy at the best validation
# epoch) or stop on them: a run with one keeps its own eval section in the train slice, since
# training reads it (with the default evaluators only, an early_stopping that monitors a metric of
# the run's own evaluator, agent_tools' eval/tool_call_success, never sees it and never stops)
SELECT_ON_EVAL = ("best_model", "early_stopping")


def slice_config(full: dict[str, Any], defaults: dict[str, Any], stage: str) -> dict[str, Any]:
    """The stage's config: ``full``'s keys the stage reads, ``defaults``' for the rest, in ``full``'s order."""
    keep = KEEP[stage]
    if keep is ALL:
        exclude = EXCLUDE.get(stage, ())
        callbacks = (full.get("callbacks") or {}).values()
        if stage == "train" and any((c or {}).get("name") in SELECT_ON_EVAL for c in callbacks):
            exclude = tuple(k for k in exclude if k != "eval")
        keep = tuple(k for k in full if k not in exclude)
    out: dict[str, Any] = {}
    for key in list(full) + [k for k in defaults if k not in full]:
        if key in keep:
            out[key] = full[key]
        elif key in defaults:
            out[key] = defaults[key]
    if stage == "train" and environment_run(full):
        # an environment run: the default evaluators score held-out data it does not have, so
        # training evaluates nothing and the eval stage plays the run's own episodes
        out["eval"] = None
    return out


def environment_run(full: dict[str, Any]) -> bool:
    """A run that learns from an environment: a gym ``env:`` or a trainer's text ``env:``."""
    trainer = full.get("trainer") or {}
    return full.get("env") is not None or (isinstance(trainer, dict) and trainer.get("env") is not None)


def write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("full", help="the run's composed config (toolbox compose --out)")
    parser.add_argument(
        "--defaults", required=True, help="the composed default config (toolbox compose --out)"
    )
    parser.add_argument("--out-dir", required=True, help="folder for data.yaml, train.yaml, eval.yaml")
    args = parser.parse_args(argv)

    full = yaml.safe_load(Path(args.full).read_text())
    defaults = yaml.safe_load(Path(args.defaults).read_text())
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stage in KEEP:
        text = yaml.safe_dump(slice_config(full, defaults, stage), sort_keys=False, width=1000)
        changed = write_if_changed(out_dir / f"{stage}.yaml", text)
        print(f"{out_dir / f'{stage}.yaml'}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
