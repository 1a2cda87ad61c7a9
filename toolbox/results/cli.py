"""``toolbox check`` and ``toolbox report``: a run's declared expectations against its eval JSON, and
the result tables generated from those files.

    toolbox check --eval work/demo/eval.json --expect '{"eval/exact_match": {"min": 0.95}}' \
        --run demo --out work/demo/check.json
    toolbox check --eval work/agent_sft/eval.json --eval work/agent_sft/agent_eval.json \
        --expect '{"gain/answer_accuracy": {"min": 0.1}}' --run agent_sft --out work/agent_sft/check.json
    toolbox report --md report.md --html report.html               # every run of config/config.yaml
    toolbox matrix --name demo --stage experiment=demo --out work/matrix/demo --expect-run demo
    toolbox report --matrix work/matrix/demo --into examples/sft_arith/README.md --block demo-matrix
    toolbox plan results/demo/                                      # what snakemake will recompute, and why
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def cmd_check(args: argparse.Namespace) -> int:
    from toolbox.core.atomic import atomic_write_text
    from toolbox.core.errors import DataError
    from toolbox.results.expect import check, flat, markdown_table

    expect = parse_expect(args.expect)
    paths = [Path(p) for p in args.eval]
    path = paths[0]
    metrics: dict = {}
    for p in paths:
        if not p.is_file():
            raise DataError(
                f"--eval: {p} does not exist; run the eval stage first (agent, for agent_eval.json)."
            )
        for key, value in flat(json.loads(p.read_text())).items():
            if key in metrics:
                raise DataError(
                    f"--eval: metric {key!r} is in two of {', '.join(map(str, paths))}; give each once."
                )
            metrics[key] = value
    rows = check(metrics, expect, where=f"runs.{args.run}.expect" if args.run else "expect")
    table = markdown_table(rows, run=args.run)
    passed = all(r.passed for r in rows)
    record = {"run": args.run, "eval": str(path), "passed": passed, "rows": [r.as_dict() for r in rows]}
    if not passed:
        failed = ", ".join(r.metric for r in rows if not r.passed)
        stale = mark_published(Path(args.published), record) if args.published else None
        note = f"\n{stale} now says passed: false (it held an earlier run's pass)" if stale else ""
        print(
            f"error: run {args.run or path} does not reach what it declares ({failed}):\n{table}{note}",
            file=sys.stderr,
        )
        return 1
    if args.html:
        from toolbox.results.report import check_page

        atomic_write_text(Path(args.html), check_page(args.run or path.parent.name, metrics, expect))
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(table if rows else f"run {args.run or path}: no expectations declared\n", end="")
    return 0


def mark_published(folder: Path, record: dict) -> Path | None:
    """After a failed check: the run's published check.json (``results/<run>/check.json``, from an
    earlier run that passed), if there is one, is replaced by the failing record, so that the
    published folder never shows a stale pass. Returns the file replaced, or None."""
    from toolbox.core.atomic import atomic_write_text

    published = folder / "check.json"
    if not published.is_file():
        return None
    stale = {
        **record,
        "note": "the latest check of this run failed; the rest of this folder is from an earlier run",
    }
    atomic_write_text(published, json.dumps(stale, indent=2, sort_keys=True) + "\n")
    return published


def parse_expect(text: str) -> dict:
    """An ``--expect`` argument (JSON) as a dict, or a ConfigError showing how to write it."""
    from toolbox.core.errors import ConfigError

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f'--expect: not JSON ({e}); write it as \'{{"eval/exact_match": {{"min": 0.95}}}}\'.'
        ) from None


def cmd_report(args: argparse.Namespace) -> int:
    from toolbox.results import dvc_plots
    from toolbox.results.report import write_report

    if args.dvc_template:
        print(dvc_plots.write_template(Path(args.dvc_template)))
    if args.dvc_plots:
        print(dvc_plots.show(Path(args.root), Path(args.dvc_plots)))
    if (args.dvc_template or args.dvc_plots) and not (args.md or args.html or args.into or args.matrix):
        return 0

    for path in write_report(
        config=Path(args.config),
        root=Path(args.root),
        matrix=[Path(m) for m in args.matrix],
        md=Path(args.md) if args.md else None,
        html=Path(args.html) if args.html else None,
        into=Path(args.into) if args.into else None,
        block=args.block,
        title=args.title,
        expect_run=args.expect_run,
        expect=parse_expect(args.expect) if args.expect else None,
        metrics=[m for m in (args.metrics or "").split(",") if m],
        folders=[Path(f) for f in args.folders],
    ):
        print(path)
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    import yaml

    from toolbox.core.errors import ConfigError
    from toolbox.results.matrix import parse_seeds, run_matrix

    expect = parse_expect(args.expect) if args.expect else None
    if args.expect_run:
        runs = (yaml.safe_load(Path(args.config).read_text()) or {}).get("runs") or {}
        if args.expect_run not in runs:
            raise ConfigError(
                f"--expect-run: no run '{args.expect_run}' in {args.config} (runs: {', '.join(runs)})."
            )
        expect = runs[args.expect_run].get("expect")
    command = "toolbox matrix " + " ".join(
        [
            f"--name {args.name}",
            *(f"--stage {json.dumps(s)}" for s in args.stage),
            f"--seeds {args.seeds}",
            f"--forwards {args.forwards}",
            f"--threads {args.threads}",
        ]
    )
    run_matrix(
        args.name,
        [shlex.split(s) for s in args.stage],
        Path(args.out),
        parse_seeds(args.seeds),
        args.forwards.split(","),
        [int(t) for t in args.threads.split(",")],
        jobs=args.jobs,
        nice=args.nice,
        expect=expect,
        command=command,
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import yaml

    from toolbox.core.errors import ConfigError
    from toolbox.results.estimate_experiment import split_targets
    from toolbox.results.plan import markdown, plan, target_runs

    root = Path(args.root)
    config = root / "config" / "config.yaml"
    targets, experiment = split_targets(args.targets)
    if experiment and not args.estimate:
        raise ConfigError(
            f"toolbox plan: {experiment[0]!r} names an experiment, which only --estimate measures "
            "(`toolbox plan --estimate experiment=NAME`); the plan itself is of the workflow's runs."
        )
    if not config.is_file() and not (experiment and not targets):
        raise ConfigError(
            f"toolbox plan: {config} does not exist; run it from the workflow's folder (--root)."
        )
    all_runs = ((yaml.safe_load(config.read_text()) or {}).get("runs") or {}) if config.is_file() else {}
    train_runs: list[str] = []
    if targets or not experiment:
        # compose only the runs the targets need (a run and those it starts from), not all of them
        jobs = plan(root, targets, target_runs(targets, all_runs))
        print(markdown(jobs), end="")
        train_runs = sorted({j.run for j in jobs if j.stage == "train" and j.run})
        if args.estimate:
            from toolbox.results.plan import build_data

            build_data(root, [r for r in train_runs if any(j.stage == "data" and j.run == r for j in jobs)])
    if args.estimate:
        from toolbox.results.estimate import estimate_run
        from toolbox.results.estimate import markdown as estimate_table

        if experiment:
            from toolbox.results.estimate_experiment import prepare

            train_runs.append(prepare(root, experiment, all_runs))
        if targets or not experiment:
            print()
        print(estimate_table([e for run in train_runs for e in estimate_run(root, run)]), end="")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="compare a run's eval JSON with what it declares (expect:); exit 1 if it falls short"
    )
    p.add_argument(
        "--eval",
        required=True,
        action="append",
        help="the run's eval JSON (toolbox eval --out); again for another metrics file (agent_eval.json), "
        "whose nested keys are joined with '/' (gain/answer_accuracy)",
    )
    p.add_argument(
        "--expect", required=True, help='the expectations as JSON: {"eval/exact_match": {"min": 0.95}}'
    )
    p.add_argument("--run", help="the run's name (for the messages and the table)")
    p.add_argument("--out", help="write the checked rows as JSON here when every expectation holds")
    p.add_argument("--html", help="and the table (with every eval metric) as an HTML page here")
    p.add_argument(
        "--published",
        help="the run's published folder (results/<run>/): when the check fails, its check.json says "
        "passed: false instead of an earlier pass",
    )
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("report", help="result tables (Markdown, HTML) generated from the runs' eval JSON")
    p.add_argument(
        "folders", nargs="*", metavar="RUN_DIR",
        help="run folders holding an eval.json (any run, `toolbox train`'s too); default: config's runs",
    )  # fmt: skip
    p.add_argument("--config", default="config/config.yaml", help="the workflow's runs and their expect:")
    p.add_argument("--root", default=".", help="the folder holding results/<run>/ (default: here)")
    p.add_argument(
        "--matrix",
        action="append",
        default=[],
        help="a folder of perturbation runs (<label>/eval.json + <label>/run.json); repeatable",
    )
    p.add_argument("--md", help="write the Markdown report here")
    p.add_argument("--html", help="write a self-contained HTML report here")
    p.add_argument("--into", help="replace the block --block of this Markdown file with the tables")
    p.add_argument(
        "--block", default="results", help="the block's name: <!-- report:NAME --> ... <!-- /report:NAME -->"
    )
    p.add_argument("--title", default="Results", help="the HTML page's title")
    p.add_argument("--expect-run", help="check a --matrix against this run's expect: in --config")
    p.add_argument(
        "--expect",
        help='check a --matrix against this expectation (JSON: {"eval/exact_match": {"min": 0.95}})',
    )
    p.add_argument(
        "--metrics",
        help="a --matrix's metrics to show, comma-separated (eval/exact_match,eval/accuracy), each with its "
        "before/ and gain/ values (default: all)",
    )
    p.add_argument(
        "--dvc-plots",
        metavar="DIR",
        help="also `dvc plots show` into DIR with vega inlined (renders offline)",
    )
    p.add_argument(
        "--dvc-template", metavar="FILE", help="write DVC's HTML template with vega inlined (--html-template)"
    )
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser(
        "matrix", help="a recipe over seeds x trainer.forward x torch threads, each run evaluated"
    )
    p.add_argument("--name", required=True, help="the recipe's name (the report's title)")
    p.add_argument(
        "--stage",
        action="append",
        required=True,
        help="one training stage's overrides, space-separated; repeat for SFT then GRPO/DPO",
    )
    p.add_argument("--out", required=True, help="folder for the points (s<seed>-<forward>-t<threads>/)")
    p.add_argument("--seeds", default="0-4", help="seeds: 0-4 or 0,1,2")
    p.add_argument("--forwards", default="lean,exact", help="trainer.forward values of the supervised stages")
    p.add_argument("--threads", default="1,2", help="torch thread counts (num_threads)")
    p.add_argument("--jobs", type=int, default=2, help="points trained at once")
    p.add_argument("--nice", type=int, default=5, help="niceness of the training processes (0: none)")
    p.add_argument("--expect", help='the expectation as JSON ({"eval/exact_match": {"min": 0.95}})')
    p.add_argument("--expect-run", help="take the expectation of this run of --config")
    p.add_argument("--config", default="config/config.yaml", help="the workflow's runs (for --expect-run)")
    p.set_defaults(fn=cmd_matrix)

    p = sub.add_parser(
        "plan",
        help="what `snakemake` will recompute, per stage and run, and why (exact, unlike snakemake -n)",
    )
    p.add_argument(
        "targets", nargs="*",
        help="Snakemake targets (default: the default target); with --estimate also experiment=NAME "
        "[KEY=VALUE ...], an experiment that is not a run of config/config.yaml (work/NAME/)",
    )  # fmt: skip
    p.add_argument("--root", default=".", help="the workflow's folder (default: here)")
    p.add_argument(
        "--estimate", action="store_true",
        help="also calibrate each train stage that would rerun (a few measured steps, cached by its inputs) "
        "and print its predicted wall time, peak memory and SLURM request",
    )  # fmt: skip
    p.set_defaults(fn=cmd_plan)
