"""The README's example commands, run in order on a fresh folder at small step counts, leave each
run folder consistent (issue 38: run in order, they once mixed two runs in results/sft_arith/).

The commands are read from the README's "Examples:" block, so the test follows it as it changes.
Each one that trains or evaluates on this machine runs as written, with small settings added for
the keys it leaves to the experiment (fewer steps, a smaller model, less data); the ones that need
a cluster, a second process group or a server (launcher=slurm, launcher=torchrun, serve, bench) are
left out. Afterwards each folder under results/ holds one run: its config.yaml is the one its last
command asked for, its checkpoints and model are that run's (no step past max_steps, the last one
at max_steps) and an eval.json in it is what `toolbox eval` of its model gives now (the friction:
a second configuration's model beside the first one's eval.json).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "model.hidden_size": "64",
    "model.num_layers": "1",
    "model.num_heads": "2",
    "model.num_kv_heads": "2",
    "model.intermediate_size": "128",
    "data.source.num_train": "64",
    "data.source.num_test": "8",
    "trainer.batch_size": "8",
    "trainer.max_steps": "3",
    "trainer.eval_every": "0",
    "trainer.save_every": "3",
    "scheduler.warmup_steps": "1",
    "eval.exact_match.max_examples": "4",
    "device": "cpu",
    "num_threads": "1",
}
LEFT_OUT = ("launcher=slurm", "launcher=torchrun", "toolbox serve", "toolbox bench")


def readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^Examples:\n\n```\n(.*?)^```", text, flags=re.M | re.S)
    assert block, "README.md has no 'Examples:' code block"
    commands = []
    for line in block.group(1).splitlines():
        command = line.split("  #")[0].strip()
        if command.startswith("toolbox ") and not any(s in command for s in LEFT_OUT):
            commands.append(command)
    return commands


def small(args: list[str]) -> list[str]:
    """``args`` (one toolbox command's overrides) with the small settings for the keys it leaves to
    the experiment and that the composed config has; its own step counts capped at 3."""
    from omegaconf import OmegaConf

    from toolbox.experiment import load_config

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    capped = [re.sub(r"^(trainer\.max_steps)=(\d+)$", r"\1=3", a) for a in args]
    cfg = load_config(overrides)
    own = {o.split("=", 1)[0] for o in overrides}
    missing = object()
    added = [
        f"{k}={v}"
        for k, v in SMALL.items()
        if k not in own and OmegaConf.select(cfg, k, default=missing) is not missing
    ]
    return capped + added


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """One README command (``a && b`` runs both), with small settings, in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = None
    for part in command.split("&&"):
        argv = shlex.split(part)
        assert argv[0] == "toolbox"
        sub, rest = argv[1], argv[2:]
        if sub in ("train", "compose", "launch") and "--config" not in rest:
            rest = small(rest)
        done = subprocess.run(
            [sys.executable, "-m", "toolbox.cli", sub, *rest],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            return done
    return done


@pytest.mark.slow
def test_the_readme_examples_in_order_leave_each_run_folder_consistent(tmp_path: Path) -> None:
    commands = readme_examples()
    assert commands[0].startswith("toolbox train experiment=sft_arith")
    assert any("--new-folder" in c for c in commands)
    for command in commands:
        done = run(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, command

    folders = sorted(p.parent for p in (tmp_path / "results").glob("*/config.yaml"))
    assert {"sft_arith", "sft_arith-2", "dpo_arith"} <= {f.name for f in folders}, folders
    for folder in folders:
        cfg = yaml.safe_load((folder / "config.yaml").read_text())
        max_steps = cfg["trainer"]["max_steps"]
        assert max_steps <= 3, folder
        steps = sorted(int(p.name.split("_")[1]) for p in (folder / "checkpoints").glob("step_*"))
        assert steps and steps[-1] == max_steps, (folder, steps)
        logged = [
            json.loads(line).get("step", 0) for line in (folder / "metrics.jsonl").read_text().splitlines()
        ]
        assert max(logged) <= max_steps, folder
        if (folder / "eval.json").exists():  # an evaluation of this folder's model, not an older one's
            again = tmp_path / f"again-{folder.name}.json"
            done = run(f"toolbox eval --run results/{folder.name} --out {again}", tmp_path)
            assert done.returncode == 0, done.stderr[-3000:]
            assert json.loads((folder / "eval.json").read_text()) == json.loads(again.read_text()), folder
    # the runs that differ from sft_arith's configuration went beside it, each with its own settings
    configs = {f.name: (f / "config.yaml").read_text() for f in folders}
    assert "name: adamw" in configs["sft_arith"] and "precision:\n  name: fp32" in configs["sft_arith"]
    changed = [name for name, text in configs.items() if "name: sgd" in text]
    assert changed and all(re.fullmatch(r"sft_arith-\d+", name) for name in changed), changed
