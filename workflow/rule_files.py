"""workflow/rules/*.smk, generated from the stage definitions (workflow/stages.py).

Each stage becomes one Snakemake rule whose file shows its paths: ``input:``, ``output:``,
``log:``, ``benchmark:`` as path patterns with the ``{run}`` wildcard, and ``shell:`` as the stage's
command with ``{input.*}``, ``{output.*}`` and ``{params.*}`` in place of the template's names. What
depends on the run's entry (its overrides, its ``expect:``, the model of ``init_from``) comes from
the helpers of ``common.smk`` (``after_compose``, ``run_inputs``, ``run_value``), named in the rule;
every rule after compose also waits for the composes of the runs whose outputs it reads
(``upstream_composes``).

No rule has a ``message:``: Snakemake then prints ``Job N: <message>`` instead of the job's block
(``rule <name>:``, its paths, the reason it runs), and its failed-job report keeps printing
``message: None`` anyway (that line shows the executor's message, which the local executor never
sets). A failing stage's explanation reaches the terminal from its shell command instead (the log
is printed to stderr when the command fails).
"""

from __future__ import annotations

from pathlib import Path
from string import Formatter

from runs import entry_values, path_templates
from stages import DVC_RECORDER, PRODUCER, REPO, STAGES, Stage

RULES_DIR = "workflow/rules"
HEADER = """\
# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py
"""
WIDTH = 100
INDENT = " " * 4


def _str(text: str) -> str:
    """A double-quoted Python string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _escape(text: str) -> str:
    """Literal text of a shell command: Snakemake formats it, so braces are doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def _comment(text: str) -> list[str]:
    lines, line = [], "#"
    for word in text.split():
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = "#"
        line += " " + word
    return [*lines, line] if line != "#" else lines


def snakemake_input(path: str) -> str:
    """The path Snakemake sees for a dep: a side product (``snakemake=False``, metrics.jsonl) is
    reached through its stage's first declared output (train's model/, written last)."""
    if path in PRODUCER:
        producer, out = PRODUCER[path]
        if not out.snakemake:
            return next(o.path for o in producer.outs.values() if o.snakemake)
    return path


def _is_source_folder(path: str) -> bool:
    return path not in PRODUCER and "{" not in path and (REPO / path).is_dir()


def _inputs(stage: Stage) -> list[str]:
    lines = []
    for key, path in stage.deps.items():
        if key in stage.dvc_only:
            continue
        seen = snakemake_input(path)
        if _is_source_folder(path):
            value = f"files_under({_str(path)})"
        elif key in stage.after_compose:
            value = f"after_compose({_str(seen)})"
        else:
            value = _str(seen)
        note = f"  # {Path(path).name} is written beside it (not declared: see train)" if seen != path else ""
        lines.append(f"{key}={value},{note}")
    if stage.run_inputs:
        lines.append(f"extra=run_inputs({', '.join(_str(k) for k in stage.run_inputs)}),")
    if stage.per_run and not stage.checkpoint:
        # every stage after compose waits for the composes of the runs it reads from (common.smk)
        lines.append("upstream=upstream_composes(),")
    return lines


def _outputs(stage: Stage) -> list[str]:
    lines = []
    for key, out in stage.outs.items():
        if not out.snakemake:
            continue
        path = f"directory({_str(out.path)})" if out.directory else _str(out.path)
        if not out.report:
            lines.append(f"{key}={path},")
            continue
        lines += [
            f"{key}=report(",
            f"{INDENT}{path},",
            f"{INDENT}caption={_str(f'../report/{out.report}.rst')},",
            f"{INDENT}category={_str(out.report)},",
            f'{INDENT}subcategory="{{run}}",',
        ]
        labels = f'"run": "{{run}}", "stage": {_str(stage.name)}'
        if out.directory:
            lines.append(f'{INDENT}patterns=["{{name}}.png"],')
            # each file its own label: the report lists (and its search finds) every curve, where
            # entries of equal labels showed as one
            labels += ', "curve": "{name}"'
        lines += [f"{INDENT}labels={{{labels}}},", "),"]
    return lines


def _field(stage: Stage, name: str) -> str:
    """A name of the command template as Snakemake writes it in the rule's shell command."""
    if name == "run":
        return "{wildcards.run}"
    paths = path_templates()
    if name not in paths:
        return f"{{params.{name}}}"
    template = paths[name]
    for key, dep in stage.deps.items():
        # a dep read through compose is the path itself: before compose has run, Snakemake shows
        # compose's first output in its place (snakemake -n -p)
        through = key in stage.after_compose
        if dep == template and snakemake_input(dep) == dep and not _is_source_folder(dep) and not through:
            return f"{{input.{key}}}"
    for key, out in stage.outs.items():
        if out.path == template and out.snakemake:
            return f"{{output.{key}}}"
    return template.replace("{run}", "{wildcards.run}")


def _template_names(stage: Stage) -> list[str]:
    return [name for _, name, _, _ in Formatter().parse(stage.cmd) if name is not None]


def shell_command(stage: Stage) -> str:
    """The rule's shell command: the stage's command, its log, and (show_log_on_failure) the log on
    stderr when it fails, as ``runs.shell_line`` writes it for DVC."""
    cmd = ""
    for literal, name, _, _ in Formatter().parse(stage.cmd):
        cmd += _escape(literal)
        if name is not None:
            cmd += _field(stage, name)
    line = f"( {cmd} ) 3>&2 > {{log}} 2>&1"  # as runs.shell_line: fd 3 is the terminal
    if stage.show_log_on_failure:
        line += " || {{ cat {log} >&2; exit 1; }}"
    # then the stage is recorded into dvc.lock, so that `dvc status` sees what Snakemake built
    name = stage.dvc_name("{wildcards.run}") if stage.per_run else stage.dvc_name(None)
    return f"{line} && python {DVC_RECORDER} {name}"


def _params(stage: Stage) -> list[str]:
    per_run = set(entry_values("r", {"experiment": "e"})) - {"run"}
    names = dict.fromkeys(n for n in _template_names(stage) if n in per_run)
    lines = [f"{n}=run_value({_str(n)})," for n in names]
    if stage.watch_overrides:
        lines.append('run_overrides=run_value("overrides"),')
    return lines


def _block(name: str, lines: list[str]) -> list[str]:
    return [f"{INDENT}{name}:", *(f"{INDENT * 2}{line}" for line in lines)]


def rule_text(stage: Stage) -> str:
    lines = _comment(stage.comment) if stage.comment else []
    lines += ["", ""] if lines else []
    kind = "checkpoint" if stage.checkpoint else "rule"
    lines.append(f"{kind} {stage.name}:")
    if stage.deps or stage.run_inputs:
        lines += _block("input", _inputs(stage))
    lines += _block("output", _outputs(stage))
    lines += _block("log", [f"{_str(stage.log())},"])
    lines += _block("benchmark", [_str(stage.benchmark())])
    lines += _block("conda", ['"../envs/toolbox.yaml"'])
    if stage.train_resources:
        lines.append(f'{INDENT}threads: lambda wildcards: entry(wildcards.run)["resources"]["cpus"]')
        keys = ("cpus", "mem_mb", "runtime", "gpu", "gpu_model", "nodes", "slurm_partition")
        lines += _block(
            "resources",
            [f'{"cpus_per_task" if k == "cpus" else k}=train_resource("{k}"),' for k in keys]
            # one task per node: with --ntasks=1 SLURM shrinks --nodes to 1
            + ['tasks=train_resource("nodes"),'],
        )
    params = _params(stage)
    if params:
        lines += _block("params", params)
    lines += _block("shell", [_str(shell_command(stage))])
    return "\n".join(lines) + "\n"


def rule_files() -> dict[str, str]:
    """workflow/rules/<file>.smk -> its text, for every stage's rule file."""
    files: dict[str, list[str]] = {}
    for stage in STAGES:
        files.setdefault(stage.file, []).append(rule_text(stage))
    return {f"{RULES_DIR}/{name}.smk": HEADER + "\n" + "\n\n".join(texts) for name, texts in files.items()}


def stale_rule_files(root: Path = REPO) -> list[str]:
    """The rule files that differ from what rule_files() would write (or are missing)."""
    return [
        path
        for path, text in rule_files().items()
        if not (root / path).is_file() or (root / path).read_text() != text
    ]
