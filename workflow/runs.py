"""A run's instance of the stages: its entry of config/config.yaml, its Hydra overrides, the inputs
that depend on it (``init_from``, ``data_from_traces``, ``agent``) and its commands.

Only the standard library: the Snakefile imports this module on every call.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from stages import DEFAULTS, PATHS, PUBLISHER, RUN_INPUTS, SERVE_BENCH, SLICER, Stage

# -- runs -----------------------------------------------------------------------------------------
RESOURCE_DEFAULTS: dict[str, Any] = {"cpus": 2, "mem_mb": 4000, "runtime": 60, "gpu": 0, "nodes": 1}


def run_entry(runs: dict[str, Any], run: str) -> dict[str, Any]:
    """The run's entry of config/config.yaml; an unknown name fails with the list of runs."""
    if run not in runs:
        import difflib

        close = difflib.get_close_matches(run, list(runs), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise KeyError(
            f"unknown run '{run}'.{hint} The runs in config/config.yaml are: {', '.join(sorted(runs))}."
        )
    return runs[run]


# A run with ``init_from: <other run>`` starts from the other run's trained model and tokenizer
# (GRPO after SFT): its composed config points model.path and tokenizer.path at that model, and the
# stages that read it (data saves its tokenizer, train loads its weights, eval scores it as "before";
# ``run_inputs=("init_model",)``) wait for the other run's train stage and rerun when it changes.
def traces_data(entry: dict[str, Any] | None) -> str | None:
    """The dataset a run with ``data_from_traces: <run>`` trains on (made from that run's traces)."""
    source = (entry or {}).get("data_from_traces")
    return PATHS["traces_data"].format(run=source) if source else None


def run_input(kind: str, run: str | None, entry: dict[str, Any] | None) -> str | None:
    """The path of one of RUN_INPUTS for this run, or None when the run has none."""
    agent = (entry or {}).get("agent")
    if kind == "init_model":
        return init_model(entry)
    if kind == "traces_data":
        return traces_data(entry)
    if kind == "agent_script":
        return agent["script"] if agent else None
    if kind == "agent_eval":
        return PATHS["agent_eval"].format(run=run) if agent and run is not None else None
    raise KeyError(f"unknown run input {kind!r}; the kinds are: {', '.join(RUN_INPUTS)}")


def upstream_runs(run: str, runs: dict[str, Any]) -> list[str]:
    """The runs whose outputs this run reads (the model of ``init_from``, the dataset of
    ``data_from_traces``), and the runs those read from, nearest first; none for a run that reads no
    other run's output. The config is free of cycles (run_config.py); a repeated run is listed once.
    """
    found: list[str] = []
    todo = [run]
    while todo:
        entry = runs.get(todo.pop(0)) or {}
        for key in ("init_from", "data_from_traces"):
            source = entry.get(key)
            if source and source != run and source not in found:
                found.append(source)
                todo.append(source)
    return found


def extra_deps(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> list[str]:
    """Inputs a stage has for this run only: those of its ``run_inputs`` the run has, in order."""
    return [p for kind in stage.run_inputs if (p := run_input(kind, run, entry))]


def init_model(entry: dict[str, Any] | None) -> str | None:
    """The trained model folder a run starts from (``init_from``), or None."""
    source = (entry or {}).get("init_from")
    return PATHS["model"].format(run=source) if source else None


def overrides(run: str, entry: dict[str, Any]) -> list[str]:
    """The Hydra overrides that compose the run: its experiment, its name, the model it starts from
    (``init_from``), its own overrides, and the run dir the workflow trains in (last, so that it
    always wins)."""
    start = init_model(entry)
    init = (
        ["model=pretrained", f"model.path={start}", "tokenizer=pretrained", f"tokenizer.path={start}"]
        if start
        else []
    )
    data = traces_data(entry)
    if data:
        init += ["data=local", f"data.source.path={data}", "data.dataset.name=chat"]
    return [
        f"experiment={entry['experiment']}",
        f"run_name={run}",
        *init,
        *[str(o) for o in entry.get("overrides") or []],
        f"run_dir={PATHS['run_dir'].format(run=run)}",
    ]


def run_deps(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> list[str]:
    """The stage's inputs for this run: its declared deps and its ``extra_deps``."""
    return [d.format(run=run) for d in stage.deps.values()] + extra_deps(stage, run, entry)


def runs_stage(entry: dict[str, Any] | None, stage: Stage) -> bool:
    """Whether the run has this stage: a stage ``when`` a key needs it in the entry (``agent``), and
    a run's ``skip`` leaves out optional stages."""
    return stage.applies(entry) and (entry is None or stage.name not in (entry.get("skip") or []))


def resources(entry: dict[str, Any]) -> dict[str, Any]:
    return {**RESOURCE_DEFAULTS, **(entry.get("resources") or {})}


# The command templates' names: the fixed paths and the run's paths (``{run}`` filled in) ...
FIXED_PATHS = {"defaults": DEFAULTS, "slicer": SLICER, "publisher": PUBLISHER, "serve_bench": SERVE_BENCH}


def path_templates() -> dict[str, str]:
    """Every path name a command template may use -> its template (``{run}`` left in)."""
    return {**FIXED_PATHS, **{k: v for k, v in PATHS.items() if k not in ("log", "benchmark")}}


# ... and the values that come from the run's entry (Snakemake rules take them as params).
def entry_values(run: str | None, entry: dict[str, Any] | None) -> dict[str, str]:
    """The run's values of the names of a command template that are not paths."""
    if entry is None or run is None:
        return {"publish_extra": "", "check_extra": ""}
    agent = entry.get("agent") or {}
    start = init_model(entry)
    return {
        "overrides": " ".join(shlex.quote(o) for o in overrides(run, entry)),
        "agent_script": agent.get("script", ""),
        "agent_args": " ".join(shlex.quote(str(a)) for a in agent.get("args") or []),
        "to_dataset_args": " ".join(shlex.quote(str(a)) for a in entry.get("to_dataset") or []),
        "publish_extra": f" --extra {PATHS['agent_eval'].format(run=run)}" if agent else "",
        "check_extra": f" --eval {PATHS['agent_eval'].format(run=run)}" if agent else "",
        "expect": shlex.quote(json.dumps(entry.get("expect") or {}, sort_keys=True)),
        "run": run,
        "agent_before": f" --before-model {start}" if start else "",
        "before": f" --before {start}" if start else "",
    }


def _values(run: str | None, entry: dict[str, Any] | None) -> dict[str, str]:
    return {**{k: v.format(run=run) for k, v in path_templates().items()}, **entry_values(run, entry)}


def command(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> str:
    """The stage's command for this run, without the log redirection."""
    return stage.cmd.format(**_values(run, entry))


def shell_line(cmd: str, log: str, show_log_on_failure: bool = False) -> str:
    """The command with its log: Snakemake's rule runs ``( cmd ) > log 2>&1``, DVC the same after
    creating the log folder (Snakemake creates it itself). A stage that shows its log on failure
    then copies the log to stderr, which both tools print on the terminal."""
    line = f"( {cmd} ) 3>&2 > {log} 2>&1"  # fd 3: the terminal, for train's progress (stages.PROGRESS_FD)
    return f"{line} || {{ cat {log} >&2; exit 1; }}" if show_log_on_failure else line


# -- the cross-run comparison ---------------------------------------------------------------------
# Every run's curves overlaid, one PNG per metric (`toolbox plot RUN_DIR...`): the report's
# "comparison" category (workflow/rules/compare.smk) and DVC's stage `compare` (dvc_yaml.py).
COMPARE_PLOTS = "work/_compare/plots"
COMPARE_LOG = "work/_compare/logs/compare.log"


def compare_command(runs: dict[str, Any]) -> str:
    folders = " ".join(PATHS["run_dir"].format(run=r) for r in sorted(runs))
    return f"toolbox plot {folders} --out {COMPARE_PLOTS}"


def compare_deps(runs: dict[str, Any]) -> list[str]:
    """What the comparison reads: each run's metrics.jsonl (DVC); Snakemake reaches it through the
    run's model/, written after it."""
    return [PATHS["metrics"].format(run=r) for r in sorted(runs)]
