"""Write the files generated from the stage definitions: workflow/rules/*.smk and dvc.yaml.

    python workflow/generate.py              # (re)write the rule files and dvc.yaml
    python workflow/generate.py --check      # exit 1 when either is out of date (nothing written)
    python workflow/generate.py show demo    # print every command of run 'demo'

The rule files depend on workflow/stages.py only; dvc.yaml also on the runs of config/config.yaml
(``--config`` names another file). Only the standard library, PyYAML and jsonschema are imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dvc_yaml import DVC_FILE, dvc_stages, dvc_yaml_text
from rule_files import rule_files
from run_config import CONFIG_FILE, config_errors, load_config
from runs import command, run_entry, runs_stage
from stages import REPO, STAGES


def _write(path: Path, text: str) -> None:
    """Replace the file at once (a reader sees the old text or the new, never half of it)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _show(runs: dict, run: str) -> int:
    try:
        entry = run_entry(runs, run)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    for stage in STAGES:
        name = run if stage.per_run else None
        if runs_stage(entry if name else None, stage):
            print(f"# {stage.dvc_name(name)}: {stage.doc}\n{command(stage, name, entry if name else None)}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python workflow/generate.py", description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="?", choices=("all", "rules", "dvc", "show"), default="all")
    parser.add_argument("run", nargs="?", help="the run whose commands `show` prints")
    parser.add_argument("--config", default=CONFIG_FILE)
    parser.add_argument("--out", default=DVC_FILE, help="where dvc.yaml is written")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a file differs from what would be written"
    )
    args = parser.parse_args(argv)

    cfg = load_config(args.config)
    errors = config_errors(cfg)
    if errors:
        print(f"error: {args.config} is not valid:\n" + "\n".join(f"  {e}" for e in errors), file=sys.stderr)
        return 2
    runs, tables = cfg["runs"], cfg.get("tables")
    if args.what == "show":
        if not args.run:
            print("error: show needs a run: python workflow/generate.py show demo", file=sys.stderr)
            return 2
        return _show(runs, args.run)
    files: dict[str, str] = {}
    if args.what in ("all", "rules"):
        files.update(rule_files())
    if args.what in ("all", "dvc"):
        files[args.out] = dvc_yaml_text(runs, tables)
    paths = {name: (Path(name) if Path(name).is_absolute() else REPO / name) for name in files}
    if args.check:
        stale = [
            name
            for name, text in files.items()
            if not paths[name].is_file() or paths[name].read_text() != text
        ]
        for name in stale:
            print(f"{name} is out of date with {args.config} and workflow/stages.py", file=sys.stderr)
        if stale:
            print("run: python workflow/generate.py", file=sys.stderr)
            return 1
        print(f"{', '.join(files)}: up to date")
        return 0
    for name, text in files.items():
        _write(paths[name], text)
    n = len(dvc_stages(runs, tables)["stages"])
    print(f"wrote {len(files)} files ({len(runs)} runs; {n} DVC stages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
