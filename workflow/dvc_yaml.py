"""dvc.yaml, generated from the stage definitions (workflow/stages.py) and the runs of
config/config.yaml: one DVC stage per (stage, run) and per table, the same commands as the
Snakemake rules, plus metrics and plots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from result_tables import TABLE_PATHS, table_command, table_deps, table_log
from runs import (
    COMPARE_LOG,
    COMPARE_PLOTS,
    command,
    compare_command,
    compare_deps,
    run_deps,
    runs_stage,
    shell_line,
)
from stages import CONFIG_TREE, PATHS, REPO, STAGES, Stage

DVC_FILE = "dvc.yaml"
# the modules dvc.yaml's content depends on (hashed into its fingerprint)
MADE_BY = ("stages.py", "runs.py", "result_tables.py", "dvc_yaml.py")
HEADER = """\
# GENERATED from config/config.yaml by workflow/generate.py -- do not edit by hand.
# Regenerate after changing config/config.yaml:  python workflow/generate.py
# Every command here is also a Snakemake rule (workflow/rules/*.smk): the same template, the same paths.
"""


def dvc_cmd(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> str:
    """The DVC stage's command: the stage's command with its log, after creating the log's folder."""
    log = stage.log(run)
    return f"mkdir -p {Path(log).parent} && " + shell_line(
        command(stage, run, entry), log, stage.show_log_on_failure
    )


def dvc_stages(runs: dict[str, Any], tables: dict[str, Any] | None = None) -> dict[str, Any]:
    """dvc.yaml's content as a dict: one DVC stage per (stage, run) and per table, plus metrics and
    plots."""
    stages: dict[str, Any] = {}
    for stage in STAGES:
        for run in sorted(runs) if stage.per_run else [None]:
            entry = runs[run] if run is not None else None
            if not runs_stage(entry, stage):
                continue
            spec: dict[str, Any] = {"cmd": dvc_cmd(stage, run, entry)}
            spec["deps"] = run_deps(stage, run, entry)
            outs, metrics = [], []
            for out in stage.outs.values():
                path = out.path.format(run=run)
                target = metrics if out.metrics else outs
                target.append({path: {"persist": True}} if out.persist else path)
            if outs:
                spec["outs"] = outs
            if metrics:
                spec["metrics"] = metrics
            stages[stage.dvc_name(run)] = spec
    for name, table in sorted((tables or {}).items()):
        stages[f"table-{name}"] = {
            "cmd": f"mkdir -p {Path(table_log(name)).parent} && "
            + shell_line(table_command(name, table, runs), table_log(name)),
            "deps": table_deps(table, runs),
            "outs": [TABLE_PATHS["md"].format(table=name), TABLE_PATHS["json"].format(table=name)],
        }
    if runs:  # every run's curves overlaid (workflow/rules/compare.smk runs the same command)
        stages["compare"] = {
            "cmd": f"mkdir -p {Path(COMPARE_LOG).parent} && "
            + shell_line(compare_command(runs), COMPARE_LOG),
            "deps": compare_deps(runs),
            "outs": [COMPARE_PLOTS],
        }
    plots = []
    for run in sorted(runs):
        curves = f"{PATHS['results'].format(run=run)}/curves"
        train = TRAIN_CURVE.get(trainer_name(runs[run]), "loss")
        plots.append({f"{run}-train-{train}": {"x": "step", "y": {f"{curves}/train.json": train}}})
        for metric in ("eval/token_accuracy", "eval/loss"):
            name = f"{run}-eval-{metric.removeprefix('eval/')}"
            plots.append({name: {"x": "step", "y": {f"{curves}/eval.json": metric}}})
    return {"stages": stages, "plots": plots}


# The training curve DVC plots per trainer: a GRPO run's loss is ~1e-9 at every step (a
# group-normalised advantage sums to zero), its reward is what moves. The in-training evaluation of
# every workflow run is the default perplexity evaluator: eval/loss and eval/token_accuracy.
TRAIN_CURVE = {"grpo": "reward"}


def trainer_name(entry: dict[str, Any]) -> str:
    """The trainer a run selects: a ``trainer=`` override, else its experiment file's (following
    the experiments it extends), else the default ``supervised``. Reads the YAML files only."""
    for override in reversed(entry.get("overrides") or []):
        if str(override).startswith("trainer="):
            return str(override).split("=", 1)[1]
    import yaml

    experiment, seen = entry.get("experiment"), set()
    while experiment and experiment not in seen:
        seen.add(experiment)
        path = REPO / CONFIG_TREE / "experiment" / f"{experiment}.yaml"
        if not path.is_file():
            break
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
        parent = None
        for item in defaults:
            if isinstance(item, dict) and "override /trainer" in item:
                return str(item["override /trainer"])
            if isinstance(item, str) and item != "_self_":
                parent = item
        experiment = parent
    return "supervised"


def fingerprint(runs: dict[str, Any], tables: dict[str, Any] | None = None) -> str:
    """What dvc.yaml is made from (the runs, the tables and the modules that make it), hashed: the Snakefile
    compares it with dvc.yaml's first line on every call, which costs far less than writing
    dvc.yaml anew."""
    import hashlib

    made_from = runs if not tables else {"runs": runs, "tables": tables}
    h = hashlib.sha256(json.dumps(made_from, sort_keys=True, default=str).encode())
    for module in MADE_BY:
        h.update((Path(__file__).parent / module).read_bytes())
    return h.hexdigest()[:16]


def dvc_yaml_text(runs: dict[str, Any], tables: dict[str, Any] | None = None) -> str:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    body = yaml.dump(dvc_stages(runs, tables), Dumper=dumper, sort_keys=False, width=1000)
    return f"# fingerprint: {fingerprint(runs, tables)}\n" + HEADER + body


def dvc_yaml_is_current(path: str | Path, runs: dict[str, Any], tables: dict[str, Any] | None = None) -> bool:
    """Whether the file at ``path`` was generated from these runs and tables by this version of
    the modules that make it."""
    try:
        with open(path) as f:
            first = f.readline()
    except FileNotFoundError:
        return False
    return first.strip() == f"# fingerprint: {fingerprint(runs, tables)}"
