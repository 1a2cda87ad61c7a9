"""``toolbox bundle``: share a pipeline as one archive.

The archive holds every file git tracks (the workflow, ``config/``, ``dvc.yaml``, the lock files,
the library), ``dvc.lock`` when there is one, and with ``--with-data`` the run products (``work/``,
``results/``), the DVC cache and Snakemake's record of how each output was made
(``.snakemake/metadata/``: the params, code and input checksums of every job, keyed by the output's
relative path), so that the receiver need not recompute them: tar keeps the files' times, and with
the metadata Snakemake finds every output up to date. Unpacked in a new folder::

    tar xzf pipeline.tar.gz -C new && cd new
    make install && . .venv/bin/activate        # the same pinned environment
    git init -q && git add -A && git commit -qm bundle -q   # DVC works inside a git repository
    snakemake -n results/demo/                  # what would run
    dvc repro                                   # reproduces (nothing, with --with-data and dvc.lock)
    snakemake -c2 results/demo/                 # nothing either, for a run Snakemake built
    snakemake -c1 --touch results/demo/         # once, for outputs DVC built (no Snakemake record)

``snakemake --archive`` does the same for Snakemake alone but needs conda on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

from toolbox.core.errors import ToolboxError

DATA_DIRS = ("work", "results", ".dvc/cache", ".snakemake/metadata")


def _tracked(repo: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise ToolboxError(
            f"toolbox bundle: {repo} is not a git checkout ({e}); run it from the repository."
        ) from None
    return [f for f in out.stdout.decode().split("\0") if f and (repo / f).exists()]


def make_bundle(repo: Path, out: Path, with_data: bool = False) -> dict:
    """Write the archive atomically; return its manifest (also stored inside as BUNDLE.json)."""
    repo, out = Path(repo).resolve(), Path(out)
    files = _tracked(repo)
    if (repo / "dvc.lock").is_file() and "dvc.lock" not in files:
        files.append("dvc.lock")
    if with_data:
        for folder in DATA_DIRS:
            root = repo / folder
            if root.is_dir():
                files += sorted(
                    str(p.relative_to(repo)) for p in root.rglob("*") if p.is_file() or p.is_symlink()
                )
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    manifest = {
        "commit": commit or None,
        "files": len(files),
        "with_data": with_data,
        "has_dvc_lock": "dvc.lock" in files,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in files:
            tar.add(repo / name, arcname=name, recursive=False)
        info_path = tmp.with_suffix(".json")
        info_path.write_text(json.dumps(manifest, indent=2) + "\n")
        tar.add(info_path, arcname="BUNDLE.json")
        info_path.unlink()
    os.replace(tmp, out)
    return manifest
