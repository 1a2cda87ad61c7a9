"""The workflow's stages, defined once: each one command with declared inputs and outputs, per run.

A stage is one command with declared inputs (``deps``) and outputs (``outs``), per run of
``config/config.yaml``. Two files are GENERATED from these definitions and committed:
``workflow/rules/*.smk`` (one Snakemake rule per stage, its paths written out, ``rule_files.py``) and
``dvc.yaml`` (one DVC stage per (stage, run), ``dvc_yaml.py``). Both format the same command
template below; ``tests/workflow`` checks that the two graphs agree and that both files are current.

    python workflow/generate.py              # (re)write workflow/rules/*.smk and dvc.yaml
    python workflow/generate.py --check      # exit 1 when either is out of date
    python workflow/generate.py show demo    # print every command of run 'demo'

Adding a stage: append a ``Stage`` to ``STAGES`` (its command is one ``toolbox`` subcommand with
explicit ``--out`` paths under ``work/<run>/``), name its rule file in ``rule_file`` (and include a
new file in the Snakefile), and, if the run should publish it, add its output to the ``publish``
stage. Then ``python workflow/generate.py``.

Only the standard library is imported: the Snakefile imports this module on every call, dry runs
included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# -- paths ----------------------------------------------------------------------------------------
# Stage products live under work/<run>/ (git-ignored); publish links the deliverables into
# results/<run>/. Snakemake refuses a directory() output that holds another rule's output, so
# nothing is produced inside results/<run>/ but by publish.
CONFIG_TREE = "toolbox/configs"  # the Hydra config tree that `toolbox compose` reads
SLICER = "workflow/scripts/slice_config.py"
PUBLISHER = "workflow/scripts/publish.py"
DVC_RECORDER = "workflow/scripts/dvc_record.py"  # ends every Snakemake rule: the stage into dvc.lock
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
# What a stage may read that depends on the run's entry (Stage.run_inputs; runs.extra_deps resolves them).
RUN_INPUTS = {
    "init_model": "the trained model of the run it starts from (init_from)",
    "traces_data": "the dataset made from another run's traces (data_from_traces)",
    "agent_script": "the agent's script (agent.script)",
    "agent_eval": "the agent's held-out evaluation, agent_eval.json (runs with agent)",
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
        after_compose: the deps Snakemake reads through the compose checkpoint, so that it
            re-evaluates the job once compose has run and skips it if its slice did not change.
            Every per-run stage but compose and publish names one (a stage that reads no slice, as
            plot, its first dep: else it would keep a rerun that compose withdrew upstream); publish
            reads compose's output as a plain dependency, so that a dry run lists every stage.
        run_inputs: inputs that depend on the run's entry (RUN_INPUTS): the model of
            ``init_from``, the dataset of ``data_from_traces``, the agent's script, its evaluation.
        rule_file: the workflow/rules/ file of its rule (default: the stage's name).
        comment: the comment above its rule in that file.
        train_resources: the rule asks for the run's ``resources:`` (threads, memory, GPUs, SLURM).
        watch_overrides: the rule reruns when the run's overrides change even if compose failed
            after the change (publish: Snakemake deletes a failed job's outputs and would forget).
        show_log_on_failure: a failing job prints its log on the terminal (check: the table of
            expected vs got), not only into the log file.
        dvc_only: deps only dvc.yaml declares, which Snakemake reaches through another dep: compose's
            config tree. A changed config file reruns ``defaults`` (whose input it is), and a job
            whose dependency reruns reruns too, so every compose job follows; DVC compares hashes
            (the defaults may not change), so its stage names the tree itself. Declaring the tree's
            ~120 files on every compose job would only slow Snakemake's DAG (each file of each job
            is matched against every rule's outputs): most of a 100-run dry run went to it.
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
    after_compose: tuple[str, ...] = ()
    run_inputs: tuple[str, ...] = ()
    rule_file: str = ""
    comment: str = ""
    train_resources: bool = False
    watch_overrides: bool = False
    show_log_on_failure: bool = False
    dvc_only: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [k for k in self.run_inputs if k not in RUN_INPUTS]
        if unknown or not set(self.after_compose) | set(self.dvc_only) <= set(self.deps):
            raise ValueError(
                f"stage {self.name}: run_inputs {unknown}, or after_compose or dvc_only not among its deps"
            )

    @property
    def file(self) -> str:
        """The rule file (workflow/rules/<file>.smk) the stage's rule is generated into."""
        return self.rule_file or self.name

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
    "TOOLBOX_PROGRESS_FD=3 toolbox train --config {train_cfg} --data {data} --out {run_dir} resume_from=auto"
)
# Every stage's output goes to its log; fd 3 stays the terminal Snakemake (or DVC) runs on, and the
# train command's console writes its progress lines there too (TOOLBOX_PROGRESS_FD): a training
# under `snakemake -c2` shows step, loss and eta on the screen, prefixed by the run's name.
PROGRESS_FD = 3

STAGES: tuple[Stage, ...] = (
    Stage(
        "defaults",
        "toolbox compose --out {defaults}",
        deps={"tree": CONFIG_TREE},
        outs={"config": Out(DEFAULTS)},
        per_run=False,
        doc="the toolbox's default config: what a stage's irrelevant sections are normalised to",
        rule_file="compose",
        comment="Compose: the toolbox defaults once, then per run the composed config and its per-stage slices.",
    ),
    Stage(
        "compose",
        "toolbox compose {overrides} --out {full_cfg} && "
        "python {slicer} {full_cfg} --defaults {defaults} --out-dir {config_dir}",
        deps={"defaults": DEFAULTS, "tree": CONFIG_TREE, "slicer": SLICER},
        dvc_only=("tree",),  # Snakemake: through defaults, which reads the tree
        outs={
            "full": Out(PATHS["full_cfg"]),
            "data": Out(PATHS["data_cfg"]),
            "train": Out(PATHS["train_cfg"]),
            "eval": Out(PATHS["eval_cfg"]),
        },
        checkpoint=True,
        doc="the run's composed config and one slice per stage (slice_config.py)",
        comment=(
            "compose is a checkpoint: after it reruns, Snakemake re-evaluates the stages that read a "
            "slice, and only those whose slice changed run (workflow/scripts/slice_config.py)."
        ),
    ),
    Stage(
        "data",
        "toolbox data --config {data_cfg} --out {data}",
        deps={"config": PATHS["data_cfg"]},
        outs={"data": Out(PATHS["data"], directory=True)},
        doc="records + tokenizer",
        after_compose=("config",),
        run_inputs=("init_model", "traces_data"),
        comment="Data: records + tokenizer of the run, from its data slice (seed, data, tokenizer).",
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
        after_compose=("config",),
        run_inputs=("init_model",),
        train_resources=True,
        comment=(
            "Train: the run's model. Its resources come from the run's entry in config/config.yaml "
            "(resources: cpus, mem_mb, runtime, gpu, gpu_model, nodes, slurm_partition); --profile slurm "
            "turns them into the SLURM job's request. An interrupted job resumes from "
            "work/<run>/train/checkpoints (resume_from=auto); only model/, written last, tells Snakemake "
            "that training finished. metrics.jsonl is not declared to Snakemake (a failed job's outputs "
            "are deleted, and a resumed job continues the same file): later rules reach it through "
            "model/. Distributed runs need nothing here: `toolbox train` starts through the run's "
            "configured launcher (e.g. strategy=ddp launcher=torchrun launcher.nproc=2)."
        ),
    ),
    Stage(
        "eval",
        "toolbox eval --config {eval_cfg} --data {data} --model {model}{before} --out {eval}",
        deps={"config": PATHS["eval_cfg"], "data": PATHS["data"], "model": PATHS["model"]},
        outs={"eval": Out(PATHS["eval"], metrics=True)},
        doc="eval.json (a run with init_from: also before/<metric> of the model it starts from, and gain/<metric>)",
        after_compose=("config",),
        run_inputs=("init_model",),
        comment="Eval: eval.json of the trained model, from the run's eval slice (an eval-only change reruns only this rule and publish).",
    ),
    Stage(
        "check",
        "toolbox check --eval {eval}{check_extra} --expect {expect} --run {run} --out {check} --html {check_html} "
        "--published {results}",
        deps={"eval": PATHS["eval"]},
        outs={
            "check": Out(PATHS["check"], metrics=True),
            "table": Out(PATHS["check_html"], report="evaluation"),
        },
        doc="check.json: the run's expect: against eval.json (and agent_eval.json); fails with a table of expected vs got",
        after_compose=("eval",),
        run_inputs=("agent_eval",),
        show_log_on_failure=True,
        comment=(
            "Check: the run's declared expectations (expect: in config/config.yaml) against its eval.json; "
            "a failing job prints the table of expected vs got, marks the published results/<run>/check.json "
            "as failed, and publish waits for it."
        ),
    ),
    Stage(
        "plot",
        "toolbox plot {run_dir} --out {plots}",
        deps={"metrics": PATHS["metrics"]},
        outs={"plots": Out(PATHS["plots"], directory=True, report="curves")},
        doc="PNG curves of metrics.jsonl",
        after_compose=("metrics",),
        comment="Plot: PNG curves of the run's metrics.jsonl (reached through train's model/).",
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
        after_compose=("model",),
        run_inputs=("agent_script", "init_model"),
        rule_file="traces",
        comment=(
            "Agent run -> traces -> dataset, for runs with `agent:` in config/config.yaml. The agent rule "
            "runs the run's trained model as an agent (its script), recording every model and tool call "
            "into work/<run>/traces.sqlite and its held-out scores into agent_eval.json."
        ),
    ),
    Stage(
        "traces",
        "toolbox traces to-dataset {traces} --out {traces_data} --no-progress {to_dataset_args}",
        deps={"traces": PATHS["traces"]},
        outs={"data": Out(PATHS["traces_data"], directory=True)},
        when="to_dataset",
        doc="traces -> dataset: filtered, redacted, deduplicated, split by session (card.json)",
        after_compose=("traces",),
        comment=(
            "The traces rule turns the traces into a datasets folder (`toolbox traces to-dataset`), "
            "which a run with `data_from_traces: <run>` trains on."
        ),
    ),
    Stage(
        "serve_bench",
        "python {serve_bench} --model {model} --out {bench}",
        deps={"model": PATHS["model"], "script": SERVE_BENCH},
        outs={"bench": Out(PATHS["bench"])},
        doc="bench.json: `toolbox bench serve` against `toolbox serve` of the trained model",
        after_compose=("model",),
        comment=(
            "Serve-bench: serve the trained model on a free loopback port, benchmark it with "
            "`toolbox bench serve`, stop the server by PID; bench.json (workflow/scripts/serve_bench.py)."
        ),
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
        run_inputs=("agent_eval",),
        watch_overrides=True,
        comment=(
            "Publish: results/<run>/ (a directory() target, so `snakemake results/<run>/` builds the run). "
            "Nothing else writes inside results/<run>/ (Snakemake's ChildIOException); large files are links."
        ),
    ),
)
BY_NAME = {s.name: s for s in STAGES}

# paths produced by some stage, and by which
PRODUCER: dict[str, tuple[Stage, Out]] = {o.path: (s, o) for s in STAGES for o in s.outs.values()}
