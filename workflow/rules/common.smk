"""Shared by every rule: the config (validated), the stage definitions, and the helpers that turn a
stage of workflow/stages.py into a rule's input, output, params, log and benchmark."""

import copy
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
import stages  # noqa: E402  (workflow/stages.py: the single definition of every stage)


configfile: "config/config.yaml"


CONFIG_NAME = (
    ", ".join(str(f) for f in getattr(workflow, "configfiles", []))
    or "config/config.yaml"
)
errors = stages.config_errors(config)
if errors:
    raise WorkflowError(
        f"{CONFIG_NAME} is not valid:\n" + "\n".join(f"  {e}" for e in errors)
    )
RAW_RUNS = copy.deepcopy(config["runs"])  # as written: what dvc.yaml is generated from
TABLES = copy.deepcopy(
    config.get("tables") or {}
)  # name -> table of config/config.yaml
RUNS = {
    run: {**e, "overrides": e.get("overrides") or [], "resources": stages.resources(e)}
    for run, e in config["runs"].items()
}
RUN_PATTERN = "[A-Za-z0-9][A-Za-z0-9_-]*"


wildcard_constraints:
    run=RUN_PATTERN,


def entry(run):
    """The run's entry; an unknown run fails with the list of runs in the config."""
    try:
        return stages.run_entry(RUNS, run)
    except KeyError as e:
        raise WorkflowError(e.args[0]) from None


def _snakemake_path(path):
    """A dep as Snakemake sees it. A side product (snakemake=False, e.g. metrics.jsonl) is reached
    through its stage's first declared output (train's model/, written last); a folder of the
    source tree is expanded into its files, whose contents Snakemake then checksums."""
    if path in stages.PRODUCER:
        producer, out = stages.PRODUCER[path]
        if not out.snakemake:
            return next(o.path for o in producer.outs.values() if o.snakemake)
        return path
    if Path(path).is_dir():
        return sorted(str(p) for p in Path(path).rglob("*") if p.is_file())
    return path


def stage_input(name):
    """The rule's input: the stage's deps, {run} left as the wildcard. A dep made by the compose
    checkpoint is an input function that resolves it through the checkpoint, so that Snakemake
    re-evaluates this job once compose has run (and skips it if its slice did not change); it also
    rejects an unknown run with the list of runs (compose's params do the same for publish).
    """
    stage = stages.BY_NAME[name]
    from_compose = [
        k
        for k, p in stage.deps.items()
        if stages.PRODUCER.get(p, (None,))[0] is stages.BY_NAME["compose"]
    ]
    if name == "publish":
        # the target's rule reads compose's output directly (a plain dependency), so that a dry
        # run lists every stage, and a removed compose output is rebuilt when publish reruns
        from_compose = []
    elif stage.per_run and name != "compose" and not from_compose:
        # a stage that reads no slice (plot) still waits for compose with its first dep, or it
        # would keep a rerun that compose's re-evaluation withdrew from its upstream stages
        from_compose = [next(iter(stage.deps))]
    result = {}
    for key, path in stage.deps.items():
        path = _snakemake_path(path)
        result[key] = _through_checkpoint(path) if key in from_compose else path
    if name in stages.INIT_STAGES or name in ("data", "agent", "check", "publish"):
        result["extra"] = _extra_deps(stage)
    return result


def _extra_deps(stage):
    """The stage's inputs for this run only (stages.extra_deps): the model of init_from, the
    traces dataset of data_from_traces, the agent script, the agent's evaluation (check, publish).
    """

    def resolve(wildcards):
        return stages.extra_deps(stage, wildcards.run, entry(wildcards.run))

    return resolve


def _through_checkpoint(path):
    def resolve(wildcards):
        entry(wildcards.run)
        checkpoints.compose.get(run=wildcards.run)
        return path.format(run=wildcards.run)

    return resolve


def stage_output(name):
    """The stage's declared outputs with the {run} wildcard (directory() for folders); an output
    with a report category goes into `snakemake --report` under it, per run."""
    stage = stages.BY_NAME[name]
    outputs = {}
    for k, o in stage.outs.items():
        if not o.snakemake:
            continue
        path = directory(o.path) if o.directory else o.path
        if o.report:
            caption = Path(workflow.basedir) / "workflow" / "report" / f"{o.report}.rst"
            path = report(
                path,
                caption=str(caption),
                category=o.report,
                subcategory="{run}",
                patterns=["{name}.png"] if o.directory else [],
                labels={"run": "{run}", "stage": name},
            )
        outputs[k] = path
    return outputs


def stage_cmd(name):
    """params.cmd: the stage's command for this run (a change of it, e.g. of an override, reruns the rule)."""
    stage = stages.BY_NAME[name]
    if not stage.per_run:
        return stages.command(stage, None, None)
    return lambda wildcards: stages.command(stage, wildcards.run, entry(wildcards.run))


def stage_log(name):
    return stages.BY_NAME[name].log()


def stage_benchmark(name):
    return stages.BY_NAME[name].benchmark()


def train_resource(key):
    """A train resource of the run; unset strings are "" (the SLURM plugin skips empty values)."""
    return lambda wildcards: entry(wildcards.run)["resources"].get(key) or (
        "" if key in ("gpu_model", "slurm_partition") else 0
    )


def check_dvc_yaml():
    """Warn when dvc.yaml does not describe the runs of this config (it is generated from it)."""
    dvc = Path(workflow.basedir) / stages.DVC_FILE
    if dvc.is_file() and not stages.dvc_yaml_is_current(dvc, RAW_RUNS, TABLES or None):
        logger.warning(
            f"dvc.yaml does not describe the runs of {CONFIG_NAME}: regenerate it with "
            "`python workflow/stages.py dvc` (Snakemake itself does not read dvc.yaml)."
        )


check_dvc_yaml()
