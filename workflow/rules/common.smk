"""Shared by every rule: the config (validated against workflow/schemas/config.schema.yaml), the
runs, and the helpers the generated rule files (workflow/rules/*.smk, from workflow/stages.py) name
for what depends on a run's entry: after_compose, upstream_composes, run_inputs, run_value,
train_resource.
"""

import copy
import functools
import inspect
import sys
from pathlib import Path

import snakemake.common.configfile as snakemake_configfile
import yaml
from snakemake.common import overwrite_function_params
from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
import dvc_yaml  # noqa: E402  (the modules of workflow/: the stages, the runs, dvc.yaml)
import estimated  # noqa: E402
import run_config  # noqa: E402
import runs  # noqa: E402
import stages  # noqa: E402

SNAKEMAKE_LOAD_CONFIGFILE = snakemake_configfile.load_configfile


def load_configfile_libyaml(path):
    """config/config.yaml as Snakemake's configfile: reads it (yte's YAML FullLoader) with libyaml's
    parser: the same dict for a tenth of the CPU (a config of many runs spent a second in the
    pure-Python parser). Snakemake's own loader reads what is not a YAML mapping, or a YTE template.
    """
    text = Path(path).read_text(encoding="utf-8")
    if "__use_yte__" not in text and hasattr(yaml, "CFullLoader"):
        try:
            data = yaml.load(text, Loader=yaml.CFullLoader)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict):
            return data
    return SNAKEMAKE_LOAD_CONFIGFILE(path)


# for the directive below only
snakemake_configfile.load_configfile = load_configfile_libyaml


configfile: "config/config.yaml"


snakemake_configfile.load_configfile = SNAKEMAKE_LOAD_CONFIGFILE


CONFIG_NAME = (
    ", ".join(str(f) for f in getattr(workflow, "configfiles", []))
    or "config/config.yaml"
)
try:
    validate(config, "../schemas/config.schema.yaml", set_default=False)
    errors = run_config.run_errors(config)
except WorkflowError:
    errors = run_config.schema_errors(config)  # every violation, each naming its key
if errors:
    raise WorkflowError(
        f"{CONFIG_NAME} is not valid:\n" + "\n".join(f"  {e}" for e in errors)
    )
RAW_RUNS = copy.deepcopy(config["runs"])  # as written: what dvc.yaml is generated from
TABLES = copy.deepcopy(
    config.get("tables") or {}
)  # name -> table of config/config.yaml
RUNS = {
    run: {**e, "overrides": e.get("overrides") or [], "resources": runs.resources(e)}
    for run, e in config["runs"].items()
}
RUN_PATTERN = "[A-Za-z0-9][A-Za-z0-9_-]*"


wildcard_constraints:
    run=RUN_PATTERN,


def entry(run):
    """The run's entry; an unknown run fails with the list of runs in the config."""
    try:
        return runs.run_entry(RUNS, run)
    except KeyError as e:
        raise WorkflowError(e.args[0]) from None


def files_under(folder):
    """A folder of the source tree as its files, whose contents Snakemake then checksums."""
    return sorted(str(p) for p in Path(folder).rglob("*") if p.is_file())


def per_job(func):
    """An input, params or resource function of the rules: Snakemake reads a function's signature
    (inspect.signature) at every call, twice per job and function; told once here, it gets the
    same parameters without that cost (most of a dry run of many runs is these calls).
    """
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def after_compose(path):
    """An input read through the compose checkpoint: Snakemake re-evaluates the job once compose
    has run (and skips it if its slice did not change). It also rejects an unknown run with the
    list of runs."""

    def resolve(wildcards):
        entry(wildcards.run)
        # compose has not run: the job waits for it (Snakemake's own answer to the exception,
        # given here so that Snakemake does not also rebuild the job in every DAG pass)
        return compose_pending(wildcards.run) or path.format(run=wildcards.run)

    return per_job(resolve)


# run -> (checkpoint outputs known when asked, compose_pending's answer)
COMPOSE_ASKED = {}


def compose_pending(run):
    """The compose checkpoint's target while compose of the run has not run, else None.

    Asked by every stage of the run, and Snakemake's answer (checkpoints.compose.get) expands
    the checkpoint's outputs at each call: the answer is kept per run until Snakemake records
    another checkpoint's outputs (created_output only grows), so each run asks once per change.
    """
    known = len(checkpoints.created_output)
    asked = COMPOSE_ASKED.get(run)
    if asked is None or asked[0] != known:
        try:
            checkpoints.compose.get(run=run)
            asked = (known, None)
        except IncompleteCheckpointException as e:
            asked = (known, e.targetfile)
        COMPOSE_ASKED[run] = asked
    return asked[1]


@functools.cache
def upstream(run):
    """The runs whose outputs the run reads (init_from, data_from_traces, theirs), computed once."""
    return tuple(runs.upstream_runs(run, RUNS))


def composes_pending(names):
    """The compose checkpoint's targets of those of the runs whose compose has not run."""
    return [t for run in names if (t := compose_pending(run))]


def upstream_composes():
    """The compose checkpoint's targets of the runs whose outputs this run reads (upstream()),
    while their compose has not run. Every stage after compose waits for them, so that Snakemake
    re-evaluates the job once each of them has run: it re-evaluates a job only after a checkpoint
    that the job depends on.

    Without it a run that starts from another run's model retrained after a compose that changed
    neither run's slices (a comment in toolbox/configs, an eval-only override of the other run):
    while the other run's compose was pending, its train job was to rerun (its slice not known
    yet), so the jobs of this run that read its model were marked "Input files updated by another
    job"; once that compose had run, Snakemake re-evaluated the other run's train (nothing to do)
    but kept the mark on this run's jobs, which it did not re-evaluate, and ran them. Where no run
    reads another run's output, none for every job, without a function for Snakemake to call per job.
    """
    if not any(upstream(run) for run in RUNS):
        return []
    return per_job(lambda wildcards: composes_pending(upstream(wildcards.run)))


def run_inputs(*kinds):
    """The inputs of this run only (stages.RUN_INPUTS): the model of init_from, the dataset of
    data_from_traces, the agent's script, the agent's evaluation; none where the run has none.
    Where no run of the config has any, none for every job, without a function for Snakemake to
    call per job.
    """
    if not any(runs.run_input(k, run, e) for run, e in RUNS.items() for k in kinds):
        return []
    return per_job(
        lambda wildcards: [
            p
            for kind in kinds
            if (p := runs.run_input(kind, wildcards.run, entry(wildcards.run)))
        ]
    )


@functools.cache
def entry_values(run):
    """The run's values of the command templates, computed once per run (Snakemake evaluates
    every job's params, and more than once: a dry run of many runs asks thousands of times).
    """
    return runs.entry_values(run, entry(run))


def run_value(name):
    """A value of the run's entry in the command (its overrides, its expect:, ...); a change of it
    reruns the rule. Where it is empty for every run of the config (no run has an agent, none
    starts from another), the empty string, without a function for Snakemake to call per job.
    """
    if not any(entry_values(run)[name] for run in RUNS):
        return ""
    return per_job(lambda wildcards: entry_values(wildcards.run)[name])


def train_resource(key):
    """A train resource of the run; unset strings are "" (the SLURM plugin skips empty values).
    runtime and mem_mb the run does not set come from its `toolbox plan --estimate`
    (work/<run>/estimate/train.json, workflow/estimated.py) while that matches its config.
    """

    def value(wildcards):
        entry(wildcards.run)  # an unknown run fails with the list of runs
        have = estimated.train_resources(
            RAW_RUNS[wildcards.run],
            Path("work") / wildcards.run,
            runs.RESOURCE_DEFAULTS,
        )
        return have.get(key) or ("" if key in ("gpu_model", "slurm_partition") else 0)

    return per_job(value)


def check_dvc_yaml():
    """Warn when dvc.yaml does not describe the runs of this config (it is generated from it)."""
    dvc = Path(workflow.basedir) / dvc_yaml.DVC_FILE
    if dvc.is_file() and not dvc_yaml.dvc_yaml_is_current(
        dvc, RAW_RUNS, TABLES or None
    ):
        logger.warning(
            f"dvc.yaml does not describe the runs of {CONFIG_NAME}: regenerate it with "
            "`python workflow/generate.py` (Snakemake itself does not read dvc.yaml)."
        )


check_dvc_yaml()
