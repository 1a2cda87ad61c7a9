"""A copy of the workflow in tmp_path with one tiny run, and helpers to run snakemake and dvc in it.

The copy holds what a user's checkout holds for the workflow (Snakefile, workflow/, config/,
slurm/, toolbox/configs/ for dependency tracking, .dvc config); the `toolbox` that runs is the
installed one (this virtual environment's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY_RUN = "tiny"
TINY_OVERRIDES = [
    "model.num_layers=1",
    "data.source.num_train=256",
    "data.source.num_test=32",
    "trainer.max_steps=20",
    "trainer.eval_every=10",
    "trainer.save_every=10",
    "eval.exact_match.max_examples=16",
    "device=cpu",
]


def tiny_config(**changes) -> dict:
    entry = {
        "experiment": "demo",
        "overrides": list(TINY_OVERRIDES),
        "resources": {"cpus": 1, "mem_mb": 2000, "runtime": 10},
    }
    entry.update(changes)
    return {"runs": {TINY_RUN: entry}}


def tool(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else name


class Workflow:
    """The copy, with ``snakemake``/``dvc``/``python`` runners that raise with the output on failure."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "DVC_NO_ANALYTICS": "1",
            "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "GIT_AUTHOR_NAME": "test",
            "GIT_AUTHOR_EMAIL": "test@example.com",
            "GIT_COMMITTER_NAME": "test",
            "GIT_COMMITTER_EMAIL": "test@example.com",
        }

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 600, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(
            cmd,
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {res.returncode}\n--- stdout\n{res.stdout[-6000:]}\n--- stderr\n{res.stderr[-6000:]}"
            )
        return res

    def snakemake(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.run(tool("snakemake"), *args, check=check, timeout=timeout)

    def dvc(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.run(tool("dvc"), *args, check=check, timeout=timeout)

    def write_config(self, cfg: dict) -> None:
        (self.root / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.run(sys.executable, "workflow/generate.py", "dvc")

    def git_dvc_init(self) -> None:
        self.run("git", "init", "-q")
        self.run(tool("dvc"), "init", "-q", "--force")
        # the repository's .dvcignore, not dvc init's: it leaves out Snakemake's .snakemake_timestamp
        shutil.copy2(REPO / ".dvcignore", self.root / ".dvcignore")

    @staticmethod
    def ran(output: str) -> set[str]:
        """The rules a snakemake call ran (or would run, with -n), without `all`."""
        names = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", output, flags=re.M)
        return set(names) - {"all"}

    @staticmethod
    def dvc_ran(output: str) -> set[str]:
        return set(re.findall(r"^Running stage '([^']+)'", output, flags=re.M))


def copy_workflow(dest: Path, cfg: dict | None = None) -> Workflow:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "Snakefile", dest / "Snakefile")
    shutil.copy2(REPO / ".gitignore", dest / ".gitignore")
    ignore = shutil.ignore_patterns("__pycache__", "local_slurm.sh")
    for folder in ("workflow", "slurm"):
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)
    shutil.copytree(REPO / "toolbox" / "configs", dest / "toolbox" / "configs", ignore=ignore)
    (dest / "config").mkdir()
    wf = Workflow(dest)
    wf.write_config(cfg or tiny_config())
    return wf
