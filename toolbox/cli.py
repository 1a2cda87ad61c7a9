"""The ``toolbox`` command. Every lifecycle stage is one subcommand.

Heavy libraries (torch, transformers, hydra) are imported inside the commands, so that
``toolbox --help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OVERRIDES_HELP = "Hydra-style overrides: group=option (model=tiny_llama), key=value (trainer.max_steps=50)"


def _config(args: argparse.Namespace, validate: bool = True, **where: str | None):
    """The composed config of a command (``--config`` and the overrides; ``toolbox.experiment.compose_run``)."""
    from toolbox.experiment import compose_run

    return compose_run(args.overrides, getattr(args, "config", None), validate=validate, **where)


def cmd_compose(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from toolbox.core.atomic import atomic_write_text

    cfg = _config(args)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    if args.out:
        atomic_write_text(Path(args.out), text)
    else:  # each component's name with the file:line that defines it (toolbox/experiment/sources.py)
        from toolbox.experiment.sources import component_sources, with_sources

        print(with_sources(text, component_sources(cfg)), end="")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from toolbox.launch.command import launch_config  # the same path as `toolbox launch`

    return launch_config(args)


def cmd_data(args: argparse.Namespace) -> int:
    from toolbox.data.prepared import write_prepared
    from toolbox.experiment import ExperimentBuilder

    cfg = _config(args)
    splits, tokenizer = ExperimentBuilder(cfg).build_data()
    out = write_prepared(Path(args.out), splits, tokenizer)
    counts = {"train": len(splits.train), "test": len(splits.test)} if splits else {"train": 0, "test": 0}
    print(json.dumps({"out": str(out), **counts}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolbox.core.atomic import atomic_write_text
    from toolbox.core.errors import ConfigError
    from toolbox.eval.harness.evaluators import split_harness_options, use_harness
    from toolbox.eval.run import evaluate_model

    args.overrides, harness = split_harness_options(args.overrides)  # backend=lm_eval task=...
    if args.run:
        run = Path(args.run)
        if not (run / "config.yaml").is_file():
            raise ConfigError(f"--run: {run / 'config.yaml'} does not exist; is {run} a trained run?")
        args.config = args.config or str(run / "config.yaml")
    if not args.config:
        raise ConfigError("toolbox eval needs --run DIR (a trained run) or --config FILE with --model DIR.")
    cfg = _config(args, validate=False, data_dir=args.data)
    if harness:
        use_harness(cfg, harness)
    model = Path(args.model) if args.model else Path(args.run) / "model" if args.run else None
    if model is None:
        raise ConfigError("--model: which model folder to evaluate? (with --run it defaults to <run>/model)")
    metrics = evaluate_model(cfg, model, before=Path(args.before) if args.before else None)
    text = json.dumps(metrics, indent=2, sort_keys=True) + "\n"
    if args.out:
        atomic_write_text(Path(args.out), text)
    print(text, end="")
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    from toolbox.bundle import make_bundle

    manifest = make_bundle(Path(args.repo), Path(args.out), with_data=args.with_data)
    print(json.dumps({"out": args.out, **manifest}))
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from toolbox.catalog import render_catalog

    text = render_catalog(kind=args.kind, only=args.name)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    if len(args.runs) > 1:  # several runs: overlaid, one PNG per metric
        from toolbox.eval.compare_plot import compare_runs

        out = Path(args.out) if args.out else Path(args.runs[0]).parent / "compare"
        paths = compare_runs([Path(r) for r in args.runs], out)
    else:
        from toolbox.eval.plot import plot_metrics

        paths = plot_metrics(Path(args.runs[0]), Path(args.out) if args.out else None)
    for path in paths:
        print(path)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    args.overrides = ["experiment=demo", *args.overrides]
    args.out = args.config = args.data = None
    code = cmd_train(args)
    from toolbox.experiment import load_config

    run_dir = Path(load_config(args.overrides).run_dir)
    print(f"\nDemo finished. Results in {run_dir}/: config.yaml, metrics.jsonl, checkpoints/, model/")
    print(f"Plot the curves with: toolbox plot {run_dir}")
    return code


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolbox")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def cmd_completion(args: argparse.Namespace) -> int:
    """Shell completion (shtab): ``eval "$(toolbox completion bash)"`` in ~/.bashrc, or for zsh
    ``toolbox completion zsh > ~/.zfunc/_toolbox``."""
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbox",
        description="Train, evaluate and serve models reproducibly. Every stage is one subcommand.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("completion", help="print a shell completion script: toolbox completion bash")
    p.add_argument("shell", choices=("bash", "zsh", "tcsh"), help="the shell to complete in")
    p.set_defaults(fn=cmd_completion)

    p = sub.add_parser(
        "compose", help="print (or write) the fully resolved config; printed, each name shows its file:line"
    )
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--config", help="start from this composed config.yaml instead of composing")
    p.add_argument("--out", help="write the YAML here (atomically) instead of printing it")
    p.set_defaults(fn=cmd_compose)

    p = sub.add_parser("train", help="build everything from config and train")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--config", help="a composed config.yaml (from `toolbox compose --out`)")
    p.add_argument("--data", help="the output folder of `toolbox data` (else the data are built in process)")
    p.add_argument("--out", help="run directory (overrides run_dir)")
    p.set_defaults(fn=cmd_train)
    from toolbox.launch.command import add_launch_parser, add_run_folder_flags  # toolbox launch

    add_run_folder_flags(p)

    add_launch_parser(sub, OVERRIDES_HELP)

    from toolbox.serving.bench.cli import add_bench_parser  # toolbox bench serve
    from toolbox.serving.openai.cli import add_serve_parser  # toolbox serve

    add_serve_parser(sub)
    add_bench_parser(sub)
    from toolbox.tracing.cli import add_parser as add_traces_parser  # toolbox traces

    add_traces_parser(sub)

    from toolbox.memory.cli import add_parser as add_memory_parser  # toolbox memory add|search|stats|export

    add_memory_parser(sub)

    from toolbox.eval.table import add_parser as add_table_parser  # toolbox table: mean ± std vs a paper

    add_table_parser(sub)

    p = sub.add_parser("data", help="build the data set and tokenizer once; later stages read them")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--config", help="a composed config.yaml (from `toolbox compose --out`)")
    p.add_argument(
        "--out", required=True, help="folder to write train.jsonl, test.jsonl, facts.json, tokenizer/"
    )
    p.set_defaults(fn=cmd_data)

    p = sub.add_parser("eval", help="evaluate a trained model; writes eval.json")
    p.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides (eval.exact_match.max_examples=100); backend=lm_eval|inspect_ai "
        "task=arithmetic|gsm8k|FILE.yaml [engine=hf|torch] [base_url=URL] [max_examples=N]: one harness task",
    )
    p.add_argument("--run", help="a trained run directory (its config.yaml and model/)")
    p.add_argument("--config", help="a composed config.yaml (default: <run>/config.yaml)")
    p.add_argument("--data", help="the output folder of `toolbox data` to evaluate on")
    p.add_argument("--model", help="model folder to evaluate (default: <run>/model)")
    p.add_argument("--before", help="also score this model (the one training started from): before/, gain/")
    p.add_argument("--out", help="write the metrics JSON here")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser(
        "bundle", help="share the pipeline as one archive (workflow, config, lock files[, data])"
    )
    p.add_argument("--out", required=True, help="the .tar.gz to write")
    p.add_argument("--with-data", action="store_true", help="add work/, results/ and the DVC cache")
    p.add_argument("--repo", default=".", help="the repository to bundle (default: here)")
    p.set_defaults(fn=cmd_bundle)

    from toolbox.results.cli import add_parsers as add_results_parsers  # toolbox check, report, plan

    add_results_parsers(sub)

    p = sub.add_parser("catalog", help="list every registered component with its fields, as Markdown")
    p.add_argument("kind", nargs="?", help="only this kind or config group (objective, callbacks, ...)")
    p.add_argument("name", nargs="?", help="only this component of the kind (dpo, wandb, ...)")
    p.add_argument("--out", help="write the Markdown here")
    p.set_defaults(fn=cmd_catalog)

    p = sub.add_parser("plot", help="draw a run's metrics as PNG curves; several runs: overlaid")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (hold metrics.jsonl, eval.json)")
    p.add_argument(
        "--out", help="folder for the PNGs (default: <run>/plots; several runs: <first run's parent>/compare)"
    )
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser(
        "demo", help="train, evaluate and checkpoint the embedded demo (2500 steps of a tiny Llama)"
    )
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(fn=cmd_demo)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse, with a command's overrides allowed anywhere among its options.

    ``toolbox train experiment=sft_arith --out DIR resume_from=auto``: argparse stops a positional
    list at the first option, so the overrides after the options come back unparsed; they are
    appended to ``overrides`` of every command that takes overrides (anything else stays an error).
    """
    args, rest = parser.parse_known_args(argv)
    if rest:
        if hasattr(args, "overrides") and not any(r.startswith("-") for r in rest):
            args.overrides = [*args.overrides, *rest]
        else:
            _unrecognized(parser, args, rest)
    return args


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, rest: list[str]) -> None:
    """An unknown flag is reported by the subcommand it was given to (its own usage), with the
    closest flag it does take."""
    import difflib

    command = _subcommand(parser, args)
    where = command or parser
    flag = next((r for r in rest if r.startswith("-")), rest[0]).split("=", 1)[0]
    options = [o for action in where._actions for o in action.option_strings]
    close = difflib.get_close_matches(flag, options, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    where.error(f"unrecognized arguments: {' '.join(rest)}{hint}")


def _subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The sub-parser of the command that ``args`` ran (``toolbox traces show`` nests one more)."""
    found = None
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = subs[0].choices.get(getattr(args, subs[0].dest, None)) if subs else None
        if chosen is None:
            return found
        found = parser = chosen


def main(argv: list[str] | None = None) -> int:
    import os

    # third-party bars (transformers' "Writing model shards", datasets' maps) would break ours and
    # leave \r in log files; a user who wants them sets the variable to 0
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    args = parse_args(build_parser(), argv)
    from toolbox.core.errors import ToolboxError, TrainingInterrupted

    try:
        return args.fn(args)
    except TrainingInterrupted as e:  # the step in progress finished and was checkpointed
        print(f"interrupted: {e}", file=sys.stderr)
        return e.exit_code
    except ToolboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a write the user's choice of folder or disk made fail: one line, no traceback
        from toolbox.core.output import USER_ERRNOS, describe

        if e.errno not in USER_ERRNOS:
            raise
        print(f"error: {describe(e, e.filename or '?')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
