"""A chain of runs (``init_from``): what reruns downstream after a compose.

A change that leaves every slice of the chain as it was (a comment in toolbox/configs, an eval-only
override of the upstream run) reruns compose and nothing after it; a change of a run's training
reruns that run's train and, for the upstream run, the downstream run's data and train. Snakemake
used to retrain the downstream run in the first case ("Input files updated by another job:
work/tiny/train/model"; common.smk: upstream_composes).

Snakemake decides from what it recorded of each job (its inputs' checksums, its params), so every
job runs through Snakemake; `toolbox data` and `toolbox train` are stand-ins that write their output
folder at once (compose is the real one): 30 s of CPU, 60 s on the shared 2 cores, most of it
Snakemake's own start (5 calls).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from workflow_copy import REPO, TINY_RUN, Workflow, copy_workflow, tiny_config, tool

sys.path.insert(0, str(REPO / "workflow"))
import result_tables  # noqa: E402
import runs  # noqa: E402

TARGET = "work/tuned/train/model"
STAND_IN = """#!{python}
# toolbox data / toolbox train: their output folder, holding the slice they were given; every other
# command is the real toolbox
import os, sys
from pathlib import Path

args = sys.argv[1:]
if args[0] in ("data", "train"):
    out = Path(args[args.index("--out") + 1])
    folder = out if args[0] == "data" else out / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "slice.yaml").write_text(Path(args[args.index("--config") + 1]).read_text())
    sys.exit(0)
os.execv({toolbox!r}, [{toolbox!r}, *args])
"""


def chain(root: Path) -> Workflow:
    """tiny (SFT) -> tuned (GRPO from tiny's model), as sft_warmstart -> grpo_run, with the stand-ins."""
    cfg = tiny_config()
    cfg["runs"]["tuned"] = {"experiment": "grpo_arith", "init_from": TINY_RUN, "overrides": ["device=cpu"]}
    wf = copy_workflow(root, cfg)
    stand_in = root / "stand-in" / "toolbox"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN.format(python=sys.executable, toolbox=tool("toolbox")))
    stand_in.chmod(0o755)
    wf.env["PATH"] = f"{stand_in.parent}:{wf.env['PATH']}"
    return wf


def set_override(wf: Workflow, run: str, key: str, value: str) -> None:
    cfg = yaml.safe_load((wf.root / "config" / "config.yaml").read_text())
    kept = [o for o in cfg["runs"][run]["overrides"] if not o.startswith(f"{key}=")]
    cfg["runs"][run]["overrides"] = [*kept, f"{key}={value}"]
    wf.write_config(cfg)


def jobs(output: str) -> set[tuple[str, str]]:
    """(rule, run) of every job a snakemake call ran or, with -n, would run."""
    blocks = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", output, flags=re.M)
    found = set()
    for rule, body in blocks:
        run = re.search(r"^    wildcards: run=(\S+)", body, flags=re.M)
        found.add((rule, run.group(1) if run else ""))
    return found


def ran(wf: Workflow, *args: str) -> set[tuple[str, str]]:
    """The jobs ``snakemake -c1 <args>`` ran (or, with -n, would run); it must succeed."""
    res = wf.snakemake("-c1", *args, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    return jobs(out)


def test_upstream_runs_follow_init_from_and_data_from_traces() -> None:
    cfg = {
        "base": {}, "actor": {"init_from": "base"}, "learner": {"init_from": "actor", "data_from_traces": "actor"},
        "grpo": {"init_from": "learner"}, "other": {"data_from_traces": "actor"},
    }  # fmt: skip
    assert runs.upstream_runs("grpo", cfg) == ["learner", "actor", "base"]
    assert runs.upstream_runs("other", cfg) == ["actor", "base"]
    assert runs.upstream_runs("base", cfg) == []
    table = {"rows": {"a": {"runs": ["grpo"]}, "b": {"runs": "oth*"}}}
    assert result_tables.table_upstream(table, cfg) == ["grpo", "learner", "actor", "base", "other"]


def test_a_chain_reruns_only_what_a_change_reaches(tmp_path: Path) -> None:
    wf = chain(tmp_path / "repo")
    assert ran(wf, TARGET) >= {("train", TINY_RUN), ("train", "tuned")}

    # a comment in the config tree: defaults and every compose rerun, the slices stay the same;
    # the downstream run's compose first (the order that kept its data and train scheduled)
    with open(wf.root / "toolbox/configs/config.yaml", "a") as f:
        f.write("# a comment\n")
    done = ran(wf, TARGET, "--prioritize", "work/tuned/config/full.yaml")
    assert done == {("defaults", ""), ("compose", "tuned"), ("compose", TINY_RUN)}

    # an eval-only override of the upstream run: its compose reruns, its train slice is the same
    set_override(wf, TINY_RUN, "eval.exact_match.max_examples", "8")
    assert ran(wf, TARGET) == {("compose", TINY_RUN)}

    # the downstream run trains longer: its own train, nothing of the upstream run
    set_override(wf, "tuned", "trainer.max_steps", "3")
    assert ran(wf, TARGET) == {("compose", "tuned"), ("train", "tuned")}

    # the upstream run trains longer: its train, then the downstream run's data and train
    set_override(wf, TINY_RUN, "trainer.max_steps", "3")
    done = ran(wf, TARGET)
    assert done == {("compose", TINY_RUN), ("train", TINY_RUN), ("data", "tuned"), ("train", "tuned")}
