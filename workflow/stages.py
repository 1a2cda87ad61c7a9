"""The workflow's stages, defined once. Snakemake's rules and DVC's ``dvc.yaml`` are both made from here.

A stage is one command with declared inputs (``deps``) and outputs (``outs``), per run of
``config/config.yaml``. ``workflow/rules/*.smk`` turn each stage into a Snakemake rule (paths with
a ``{run}`` wildcard, the command as ``params.cmd``); ``python workflow/stages.py dvc`` writes one
DVC stage per (stage, run) into ``dvc.yaml``. Neither repeats a command: both format the same
template below, and ``tests/workflow`` checks that the two graphs agree and that ``dvc.yaml`` is
up to date.

    python workflow/stages.py dvc            # (re)write dvc.yaml from config/config.yaml
    python workflow/stages.py dvc --check    # exit 1 when dvc.yaml is out of date
    python workflow/stages.py show demo      # print every command of run 'demo'

Adding a stage: append a ``Stage`` to ``STAGES`` (its command
is one ``toolbox`` subcommand with explicit ``--out`` paths under ``work/<run>/``), add a rule file
``workflow/rules/<name>.smk`` on the pattern of ``eval.smk``, and, if the run should publish it,
add its output to the ``publish`` stage. Then ``python workflow/stages.py dvc``.

Only the standard library and PyYAML are imported: the Snakefile imports this module on every
call, dry runs included.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILE = "config/config.yaml"
DVC_FILE = "dvc.yaml"

# -- paths ----------------------------------------------------------------------------------------
# Stage products live under work/<run>/ (git-ignored); publish links the deliverables into
# results/<run>/. Snakemake refuses a directory() output that holds another rule's output, so
# nothing is produced inside results/<run>/ but by publish.
CONFIG_TREE = "toolbox/configs"  # the Hydra config tree that `toolbox compose` reads
SLICER = "workflow/scripts/slice_config.py"
PUBLISHER = "workflow/scripts/publish.py"
SERVE_BENCH = "workflow/scripts/serve_bench.py"
DEFAULTS = "work/_defaults/config.yaml"
PATHS = {
    "config_dir": "work/{run}/config",
    "full_cfg": "work/{run}/config/full.yaml",
    "data_cfg": "work/{run}/config/data.yaml",
    "train_cfg": "work/{run}/config/train.yaml",
    "eval_cfg": "work/{run}/config/eval.yaml",
    "data": "work/{run}/data",
    "run_dir": "work/{run}/train",
    "model": "work/{run}/train/model",
    "metrics": "work/{run}/train/metrics.jsonl",
    "checkpoints": "work/{run}/train/checkpoints",
    "resume_key": "work/{run}/train/checkpoints.config.yaml",
    "eval": "work/{run}/eval.json",
    "check": "work/{run}/check.json",
    "check_html": "work/{run}/check.html",
    "bench": "work/{run}/bench.json",
    "traces": "work/{run}/traces.sqlite",
    "agent_eval": "work/{run}/agent_eval.json",
    "traces_data": "work/{run}/traces_data",
    "plots": "work/{run}/plots",
    "results": "results/{run}",
    "log": "work/{run}/logs/{stage}.log",
    "benchmark": "work/{run}/benchmarks/{stage}.tsv",
}
GLOBAL_LOG = "work/_defaults/logs/{stage}.log"
GLOBAL_BENCHMARK = "work/_defaults/benchmarks/{stage}.tsv"


@dataclass(frozen=True)
class Out:
    """One output of a stage.

    Args:
        path: path template ({run} and the PATHS names).
        directory: a folder (Snakemake ``directory()``).
        snakemake: declared to Snakemake. False for a side product that Snakemake must not delete
            when a job fails (Snakemake removes a failed job's outputs): ``metrics.jsonl`` must
            survive an interrupted train job so that the resumed job continues the same file.
            Later rules reach such a file through the stage's first Snakemake output.
        persist: DVC keeps it when the stage reruns (``persist: true``).
        metrics: a DVC metrics file (``dvc metrics show``).
        report: the category it appears under in ``snakemake --report`` (a folder: its PNGs).
    """

    path: str
    directory: bool = False
    snakemake: bool = True
    persist: bool = False
    metrics: bool = False
    report: str | None = None


@dataclass(frozen=True)
class Stage:
    """A stage: one command, its inputs and its outputs, instantiated per run.

    Args:
        name: the rule name; DVC names the stage ``<name>-<run>`` (``name`` alone when global).
        cmd: the command template. ``{overrides}`` is the run's Hydra overrides, quoted;
            every other ``{name}`` is a path of PATHS (or DEFAULTS, SLICER, PUBLISHER).
        deps: input name -> path template.
        outs: output name -> Out.
        per_run: False for the one stage shared by all runs (the toolbox defaults).
        when: the stage exists only for runs whose entry has this key (the agent and traces
            stages: runs with ``agent:``).
        checkpoint: a Snakemake checkpoint. Compose is one, so that after it reruns Snakemake
            re-evaluates every stage that reads a config slice, and a stage whose slice did not
            change does not rerun (the same per-stage check DVC makes with hashes).
        optional: a run may leave it out (``skip: [<name>]`` in its entry); no other stage reads
            its outputs (serve_bench: a graph model is not served over the OpenAI API).
    """

    name: str
    cmd: str
    deps: dict[str, str]
    outs: dict[str, Out]
    per_run: bool = True
    checkpoint: bool = False
    doc: str = ""
    when: str | None = None  # only for the runs whose entry has this key (``agent``)
    optional: bool = False

    def applies(self, entry: dict[str, Any] | None) -> bool:
        return self.when is None or bool((entry or {}).get(self.when))

    def dvc_name(self, run: str | None) -> str:
        return f"{self.name}-{run}" if self.per_run else self.name

    def log(self, run: str | None = None) -> str:
        return (PATHS["log"] if self.per_run else GLOBAL_LOG).format(run=run or "{run}", stage=self.name)

    def benchmark(self, run: str | None = None) -> str:
        return (PATHS["benchmark"] if self.per_run else GLOBAL_BENCHMARK).format(
            run=run or "{run}", stage=self.name
        )


# -- the stages -----------------------------------------------------------------------------------
# The train command keeps its checkpoints only while they belong to the same training: when the
# train slice, the data or the model it starts from (workflow/scripts/resume_key.py) differ from
# what the checkpoints were written under, they are removed first, so `resume_from=auto` resumes an
# interrupted job but never continues a different training.
TRAIN_CMD = (
    "mkdir -p {run_dir} && python workflow/scripts/resume_key.py {train_cfg} {data} > {resume_key}.new && "
    "{{ cmp -s {resume_key}.new {resume_key} || rm -rf {checkpoints}; }} && mv {resume_key}.new {resume_key} && "
    "toolbox train --config {train_cfg} --data {data} --out {run_dir} resume_from=auto"
)

STAGES: tuple[Stage, ...] = (
    Stage(
        "defaults",
        "toolbox compose --out {defaults}",
        deps={"tree": CONFIG_TREE},
        outs={"config": Out(DEFAULTS)},
        per_run=False,
        doc="the toolbox's default config: what a stage's irrelevant sections are normalised to",
    ),
    Stage(
        "compose",
        "toolbox compose {overrides} --out {full_cfg} && "
        "python {slicer} {full_cfg} --defaults {defaults} --out-dir {config_dir}",
        deps={"defaults": DEFAULTS, "tree": CONFIG_TREE, "slicer": SLICER},
        outs={
            "full": Out(PATHS["full_cfg"]),
            "data": Out(PATHS["data_cfg"]),
            "train": Out(PATHS["train_cfg"]),
            "eval": Out(PATHS["eval_cfg"]),
        },
        checkpoint=True,
        doc="the run's composed config and one slice per stage (slice_config.py)",
    ),
    Stage(
        "data",
        "toolbox data --config {data_cfg} --out {data}",
        deps={"config": PATHS["data_cfg"]},
        outs={"data": Out(PATHS["data"], directory=True)},
        doc="records + tokenizer",
    ),
    Stage(
        "train",
        TRAIN_CMD,
        deps={"config": PATHS["train_cfg"], "data": PATHS["data"]},
        outs={
            "model": Out(PATHS["model"], directory=True),
            "metrics": Out(PATHS["metrics"], snakemake=False, persist=True),
        },
        doc="the model (written last, so it exists only when training finished) and metrics.jsonl",
    ),
    Stage(
        "eval",
        "toolbox eval --config {eval_cfg} --data {data} --model {model}{before} --out {eval}",
        deps={"config": PATHS["eval_cfg"], "data": PATHS["data"], "model": PATHS["model"]},
        outs={"eval": Out(PATHS["eval"], metrics=True)},
        doc="eval.json (a run with init_from: also before/<metric> of the model it starts from, and gain/<metric>)",
    ),
    Stage(
        "check",
        "toolbox check --eval {eval}{check_extra} --expect {expect} --run {run} --out {check} --html {check_html}",
        deps={"eval": PATHS["eval"]},
        outs={
            "check": Out(PATHS["check"], metrics=True),
            "table": Out(PATHS["check_html"], report="evaluation"),
        },
        doc="check.json: the run's expect: against eval.json (and agent_eval.json); fails with a table of expected vs got",
    ),
    Stage(
        "plot",
        "toolbox plot {run_dir} --out {plots}",
        deps={"metrics": PATHS["metrics"]},
        outs={"plots": Out(PATHS["plots"], directory=True, report="curves")},
        doc="PNG curves of metrics.jsonl",
    ),
    # agent run -> traces -> dataset: runs with `agent:` (a script that runs the trained model as
    # an agent, records every model and tool call, and scores it, and the model it started from, on
    # held-out problems) and `to_dataset:` (the arguments of `toolbox traces to-dataset`); a run
    # with `data_from_traces: <run>` trains on the dataset made from that run's traces
    Stage(
        "agent",
        "python {agent_script} --model {model} --traces {traces} --eval {agent_eval}{agent_before} {agent_args}",
        deps={"model": PATHS["model"]},
        outs={"traces": Out(PATHS["traces"]), "eval": Out(PATHS["agent_eval"], metrics=True)},
        when="agent",
        doc="agent run -> traces.sqlite (every model and tool call) and agent_eval.json (held-out problems)",
    ),
    Stage(
        "traces",
        "toolbox traces to-dataset {traces} --out {traces_data} --no-progress {to_dataset_args}",
        deps={"traces": PATHS["traces"]},
        outs={"data": Out(PATHS["traces_data"], directory=True)},
        when="to_dataset",
        doc="traces -> dataset: filtered, redacted, deduplicated, split by session (card.json)",
    ),
    Stage(
        "serve_bench",
        "python {serve_bench} --model {model} --out {bench}",
        deps={"model": PATHS["model"], "script": SERVE_BENCH},
        outs={"bench": Out(PATHS["bench"])},
        doc="bench.json: `toolbox bench serve` against `toolbox serve` of the trained model",
        optional=True,
    ),
    Stage(
        "publish",
        "python {publisher} --config {full_cfg} --model {model} --eval {eval} --check {check} "
        "--metrics {metrics} --plots {plots}{publish_extra} --out {results}",
        deps={
            "config": PATHS["full_cfg"],
            "model": PATHS["model"],
            "eval": PATHS["eval"],
            "check": PATHS["check"],
            "metrics": PATHS["metrics"],
            "plots": PATHS["plots"],
            "publisher": PUBLISHER,
        },
        outs={"results": Out(PATHS["results"], directory=True)},
        doc="results/<run>/: config.yaml, model/ (links), eval.json, check.json, metrics.jsonl, curves/, plots/",
    ),
)
BY_NAME = {s.name: s for s in STAGES}

# paths produced by some stage, and by which
PRODUCER: dict[str, tuple[Stage, Out]] = {o.path: (s, o) for s in STAGES for o in s.outs.values()}


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
# (GRPO after SFT): its composed config points model.path and tokenizer.path at that model, and these
# stages read it (data saves its tokenizer, train loads its weights, eval scores it as "before"), so
# they wait for the other run's train stage and rerun when its model changes.
INIT_STAGES = ("data", "train", "eval")


def traces_data(entry: dict[str, Any] | None) -> str | None:
    """The dataset a run with ``data_from_traces: <run>`` trains on (made from that run's traces)."""
    source = (entry or {}).get("data_from_traces")
    return PATHS["traces_data"].format(run=source) if source else None


def extra_deps(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> list[str]:
    """Inputs a stage has for this run only: the model it starts from (``init_from``, INIT_STAGES),
    the traces dataset (``data_from_traces``, data), the agent script (agent), the agent's
    evaluation (check and publish of a run with ``agent``)."""
    deps = []
    start = init_model(entry)
    if start and stage.name in INIT_STAGES:
        deps.append(start)
    data = traces_data(entry)
    if data and stage.name == "data":
        deps.append(data)
    if entry and entry.get("agent") and run is not None:
        if stage.name == "agent":
            deps.append(entry["agent"]["script"])
            if start:
                deps.append(start)  # evaluated too: the "before" of agent_eval.json
        if stage.name in ("check", "publish"):
            deps.append(PATHS["agent_eval"].format(run=run))
    return deps


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


def _values(run: str | None, entry: dict[str, Any] | None) -> dict[str, str]:
    values = {
        "defaults": DEFAULTS,
        "slicer": SLICER,
        "publisher": PUBLISHER,
        "serve_bench": SERVE_BENCH,
        **{k: v.format(run=run) for k, v in PATHS.items() if k not in ("log", "benchmark")},
    }
    if entry is not None and run is not None:
        values["overrides"] = " ".join(shlex.quote(o) for o in overrides(run, entry))
        agent = entry.get("agent") or {}
        values["agent_script"] = agent.get("script", "")
        values["agent_args"] = " ".join(shlex.quote(str(a)) for a in agent.get("args") or [])
        values["to_dataset_args"] = " ".join(shlex.quote(str(a)) for a in entry.get("to_dataset") or [])
        values["publish_extra"] = f" --extra {PATHS['agent_eval'].format(run=run)}" if agent else ""
        values["check_extra"] = f" --eval {PATHS['agent_eval'].format(run=run)}" if agent else ""
        values["expect"] = shlex.quote(json.dumps(entry.get("expect") or {}, sort_keys=True))
        values["run"] = run
        start = init_model(entry)
        values["agent_before"] = f" --before-model {start}" if start else ""
        values["before"] = f" --before {start}" if start else ""
    else:
        values["publish_extra"] = values["check_extra"] = ""
    return values


def command(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> str:
    """The stage's command for this run, without the log redirection."""
    return stage.cmd.format(**_values(run, entry))


def shell_line(cmd: str, log: str) -> str:
    """The command with its log: Snakemake's rule runs ``( cmd ) > log 2>&1``, DVC the same after
    creating the log folder (Snakemake creates it itself)."""
    return f"( {cmd} ) > {log} 2>&1"


def dvc_cmd(stage: Stage, run: str | None, entry: dict[str, Any] | None) -> str:
    log = stage.log(run)
    return f"mkdir -p {Path(log).parent} && " + shell_line(command(stage, run, entry), log)


# -- the config file ------------------------------------------------------------------------------
SCHEMA = "workflow/schemas/config.schema.yaml"


def config_errors(cfg: Any) -> list[str]:
    """Every violation of the schema, each naming the bad key and the schema path, then every
    ``init_from`` that names no run or makes a cycle."""
    import yaml
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load((REPO / SCHEMA).read_text())
    errors = sorted(
        Draft202012Validator(schema).iter_errors(cfg), key=lambda e: [str(p) for p in e.absolute_path]
    )
    lines = []
    for e in errors:
        key = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        where = "/".join(str(p) for p in e.absolute_schema_path)
        lines.append(f"{key}: {e.message} (schema: {Path(SCHEMA).name}#/{where})")
    if not lines:
        lines = (
            init_from_errors(cfg["runs"])
            + data_from_traces_errors(cfg["runs"])
            + skip_errors(cfg["runs"])
            + table_errors(cfg)
        )
    return lines


def data_from_traces_errors(runs: dict[str, Any]) -> list[str]:
    """``data_from_traces`` must name a run of the file with an ``agent`` and ``to_dataset`` (whose
    traces' dataset it reads)."""
    lines = []
    for run, entry in runs.items():
        source = entry.get("data_from_traces")
        if source is None:
            continue
        if source not in runs or not (runs[source].get("agent") and runs[source].get("to_dataset")):
            with_agent = sorted(r for r, e in runs.items() if e.get("agent") and e.get("to_dataset"))
            lines.append(
                f"runs.{run}.data_from_traces: '{source}' is not a run of this file with an agent and "
                f"to_dataset (runs with both: {', '.join(with_agent) or 'none'})"
            )
        elif source == run:
            lines.append(f"runs.{run}.data_from_traces: a run cannot train on its own traces")
    return lines


def skip_errors(runs: dict[str, Any]) -> list[str]:
    """``skip`` may name only optional stages (those no other stage reads)."""
    optional = sorted(s.name for s in STAGES if s.optional)
    return [
        f"runs.{run}.skip: '{name}' is not a stage a run may skip (these may: {', '.join(optional)})"
        for run, entry in runs.items()
        for name in entry.get("skip") or []
        if name not in optional
    ]


def init_from_errors(runs: dict[str, Any]) -> list[str]:
    """``init_from`` must name another run of the file, and following it must never come back."""
    lines = []
    for run, entry in runs.items():
        source = entry.get("init_from")
        if source is None:
            continue
        if source not in runs:
            lines.append(
                f"runs.{run}.init_from: '{source}' is not a run of this file "
                f"(the runs: {', '.join(sorted(runs))})"
            )
            continue
        chain = [run]
        while source is not None and source not in chain:
            chain.append(source)
            source = runs.get(source, {}).get("init_from")
        if source == run:
            lines.append(
                f"runs.{run}.init_from: a cycle ({' -> '.join([*chain, run])}); a run cannot start from itself"
            )
    return lines


def load_config(path: str | Path = CONFIG_FILE) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_absolute():
        path = REPO / path
    with open(path) as f:
        return yaml.safe_load(f) or {}


# -- tables ---------------------------------------------------------------------------------------
# A table of config/config.yaml (``tables: {name: {metric, scale, rows: {label: {runs, reference}}}}``)
# is the mean ± std of one eval metric over each row's runs (seeds), beside the row's reference
# number (a paper's): ``toolbox table`` reads the runs' eval.json and writes the Markdown and JSON.
TABLE_PATHS = {"md": "results/tables/{table}.md", "json": "results/tables/{table}.json"}
TABLE_LOG = "work/_tables/logs/{table}.log"


def table_log(name: str) -> str:
    return TABLE_LOG.format(table=name)


def table_runs(row: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """A row's runs: a list of run names, or one glob over them (``gcn_cora_s*``)."""
    import fnmatch

    pattern = row["runs"]
    if isinstance(pattern, str):
        return sorted(r for r in runs if fnmatch.fnmatchcase(r, pattern))
    return list(pattern)


def table_deps(table: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    return [PATHS["eval"].format(run=r) for row in table["rows"].values() for r in table_runs(row, runs)]


def table_command(name: str, table: dict[str, Any], runs: dict[str, Any]) -> str:
    """The table's ``toolbox table`` command (one ``--row`` per row: label, reference, eval files)."""
    parts = ["toolbox table", "--metric", shlex.quote(table["metric"]), "--scale", str(table.get("scale", 1))]
    for label, row in table["rows"].items():
        evals = [PATHS["eval"].format(run=r) for r in table_runs(row, runs)]
        parts += ["--row", shlex.quote(str(label)), shlex.quote(str(row.get("reference", "")) or "-"), *evals]
    parts += ["--title", shlex.quote(str(table.get("title", name)))]
    parts += ["--out", TABLE_PATHS["md"].format(table=name), "--json", TABLE_PATHS["json"].format(table=name)]
    return " ".join(parts)


def table_errors(cfg: dict[str, Any]) -> list[str]:
    """Every row must name at least one run of the file."""
    runs, lines = cfg["runs"], []
    for name, table in (cfg.get("tables") or {}).items():
        for label, row in table["rows"].items():
            found = table_runs(row, runs)
            unknown = [r for r in found if r not in runs]
            if unknown or not found:
                lines.append(
                    f"tables.{name}.rows.{label}.runs: {', '.join(unknown) or repr(row['runs'])} "
                    f"names no run of this file (the runs: {', '.join(sorted(runs))})"
                )
    return lines


# -- dvc.yaml -------------------------------------------------------------------------------------
HEADER = """\
# GENERATED from config/config.yaml by workflow/stages.py -- do not edit by hand.
# Regenerate after changing config/config.yaml:  python workflow/stages.py dvc
# Every command here is also a Snakemake rule (workflow/rules/*.smk): the same template, the same paths.
"""


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
    """What dvc.yaml is made from (the runs, the tables and this file), hashed: the Snakefile
    compares it with dvc.yaml's first line on every call, which costs far less than writing
    dvc.yaml anew."""
    import hashlib

    made_from = runs if not tables else {"runs": runs, "tables": tables}
    h = hashlib.sha256(json.dumps(made_from, sort_keys=True, default=str).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def dvc_yaml_text(runs: dict[str, Any], tables: dict[str, Any] | None = None) -> str:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    body = yaml.dump(dvc_stages(runs, tables), Dumper=dumper, sort_keys=False, width=1000)
    return f"# fingerprint: {fingerprint(runs, tables)}\n" + HEADER + body


def dvc_yaml_is_current(path: str | Path, runs: dict[str, Any], tables: dict[str, Any] | None = None) -> bool:
    """Whether the file at ``path`` was generated from these runs and tables by this version of
    stages.py."""
    try:
        with open(path) as f:
            first = f.readline()
    except FileNotFoundError:
        return False
    return first.strip() == f"# fingerprint: {fingerprint(runs, tables)}"


# -- command line ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python workflow/stages.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dvc", help="write dvc.yaml from the config")
    p.add_argument("--config", default=CONFIG_FILE)
    p.add_argument("--out", default=DVC_FILE)
    p.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from what would be written"
    )
    p = sub.add_parser("show", help="print the commands of one run")
    p.add_argument("run")
    p.add_argument("--config", default=CONFIG_FILE)
    args = parser.parse_args(argv)

    cfg = load_config(args.config)
    errors = config_errors(cfg)
    if errors:
        print(f"error: {args.config} is not valid:\n" + "\n".join(f"  {e}" for e in errors), file=sys.stderr)
        return 2
    runs, tables = cfg["runs"], cfg.get("tables")
    if args.command == "show":
        try:
            entry = run_entry(runs, args.run)
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
        for stage in STAGES:
            run = args.run if stage.per_run else None
            if not runs_stage(entry if run else None, stage):
                continue
            print(f"# {stage.dvc_name(run)}: {stage.doc}\n{command(stage, run, entry if run else None)}\n")
        return 0
    text = dvc_yaml_text(runs, tables)
    out = Path(args.out)
    if not out.is_absolute():
        out = REPO / out
    if args.check:
        if not out.is_file() or out.read_text() != text:
            print(
                f"{args.out} is out of date with {args.config}; run: python workflow/stages.py dvc",
                file=sys.stderr,
            )
            return 1
        print(f"{args.out} is up to date")
        return 0
    out.write_text(text)
    print(f"wrote {args.out} ({len(runs)} runs, {sum(1 for _ in dvc_stages(runs, tables)['stages'])} stages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
