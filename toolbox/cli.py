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


def _config(args: argparse.Namespace):
    """The composed config: from --config FILE (a composed config.yaml) or composed anew, plus overrides."""
    if getattr(args, "config", None):
        from omegaconf import OmegaConf

        from toolbox.core.errors import ConfigError

        path = Path(args.config)
        if not path.is_file():
            raise ConfigError(
                f"--config: {path} does not exist; write one with `toolbox compose --out {path}`."
            )
        cfg = OmegaConf.load(path)
        bad = [o for o in args.overrides if "=" not in o or o.split("=", 1)[0].startswith(("+", "~"))]
        if bad:
            raise ConfigError(f"with --config only key=value overrides apply; got {bad[0]!r}.")
        return OmegaConf.merge(cfg, OmegaConf.from_dotlist(args.overrides))
    from toolbox.experiment import load_config

    return load_config(args.overrides)


def cmd_compose(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from toolbox.core.atomic import atomic_write_text
    from toolbox.experiment import validate_config

    cfg = _config(args)
    validate_config(cfg)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    if args.out:
        atomic_write_text(Path(args.out), text)
    else:
        print(text, end="")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from toolbox.core.registries import LAUNCHERS
    from toolbox.experiment import use_prepared_data, validate_config

    cfg = _config(args)
    if args.out:
        cfg.run_dir = str(args.out)
    if args.data:
        use_prepared_data(cfg, args.data)
    validate_config(cfg)
    launcher = LAUNCHERS.build(cfg.launcher, "launcher")
    metrics = launcher.launch(cfg)
    if metrics is not None:
        print(json.dumps({"run_dir": str(cfg.run_dir), **metrics}))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from toolbox.data.prepared import write_prepared
    from toolbox.experiment import ExperimentBuilder

    cfg = _config(args)
    splits, tokenizer = ExperimentBuilder.from_config(cfg).build_data()
    out = write_prepared(Path(args.out), splits, tokenizer)
    counts = {"train": len(splits.train), "test": len(splits.test)} if splits else {"train": 0, "test": 0}
    print(json.dumps({"out": str(out), **counts}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolbox.core.atomic import atomic_write_text
    from toolbox.core.errors import ConfigError
    from toolbox.eval.run import evaluate_model
    from toolbox.experiment import use_prepared_data

    if args.run:
        run = Path(args.run)
        if not (run / "config.yaml").is_file():
            raise ConfigError(f"--run: {run / 'config.yaml'} does not exist; is {run} a trained run?")
        args.config = args.config or str(run / "config.yaml")
    if not args.config:
        raise ConfigError("toolbox eval needs --run DIR (a trained run) or --config FILE with --model DIR.")
    cfg = _config(args)
    if args.data:
        use_prepared_data(cfg, args.data)
    model = Path(args.model) if args.model else Path(args.run) / "model" if args.run else None
    if model is None:
        raise ConfigError("--model: which model folder to evaluate? (with --run it defaults to <run>/model)")
    metrics = evaluate_model(cfg, model)
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

    text = render_catalog()
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from toolbox.eval.plot import plot_metrics

    for path in plot_metrics(Path(args.run), Path(args.out) if args.out else None):
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbox",
        description="Train, evaluate and serve models reproducibly. Every stage is one subcommand.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compose", help="print (or write) the fully resolved config")
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

    from toolbox.launch.command import add_launch_parser  # toolbox launch: local, torchrun, slurm, sweeps

    add_launch_parser(sub, OVERRIDES_HELP)

    from toolbox.serving.bench import add_bench_parser  # toolbox bench serve
    from toolbox.serving.server_cli import add_serve_parser  # toolbox serve

    add_serve_parser(sub)
    add_bench_parser(sub)

    p = sub.add_parser("data", help="build the data set and tokenizer once; later stages read them")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.add_argument("--config", help="a composed config.yaml (from `toolbox compose --out`)")
    p.add_argument(
        "--out", required=True, help="folder to write train.jsonl, test.jsonl, facts.json, tokenizer/"
    )
    p.set_defaults(fn=cmd_data)

    p = sub.add_parser("eval", help="evaluate a trained model; writes eval.json")
    p.add_argument("overrides", nargs="*", help="key=value overrides (eval.exact_match.max_examples=100)")
    p.add_argument("--run", help="a trained run directory (its config.yaml and model/)")
    p.add_argument("--config", help="a composed config.yaml (default: <run>/config.yaml)")
    p.add_argument("--data", help="the output folder of `toolbox data` to evaluate on")
    p.add_argument("--model", help="model folder to evaluate (default: <run>/model)")
    p.add_argument("--out", help="write the metrics JSON here")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser(
        "bundle", help="share the pipeline as one archive (workflow, config, lock files[, data])"
    )
    p.add_argument("--out", required=True, help="the .tar.gz to write")
    p.add_argument("--with-data", action="store_true", help="add work/, results/ and the DVC cache")
    p.add_argument("--repo", default=".", help="the repository to bundle (default: here)")
    p.set_defaults(fn=cmd_bundle)

    p = sub.add_parser("catalog", help="list every registered component with its fields, as Markdown")
    p.add_argument("--out", help="write the Markdown here")
    p.set_defaults(fn=cmd_catalog)

    p = sub.add_parser("plot", help="draw a run's metrics as PNG curves")
    p.add_argument("run", help="the run directory (holds metrics.jsonl)")
    p.add_argument("--out", help="folder for the PNGs (default: <run>/plots)")
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser(
        "demo", help="train, evaluate and checkpoint the embedded demo (about two minutes on 2 cores)"
    )
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(fn=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from toolbox.core.errors import ToolboxError

    try:
        return args.fn(args)
    except ToolboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
