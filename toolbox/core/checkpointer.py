"""Atomic checkpoints: write into a temp folder, fsync, rename.

Layout: ``<run_dir>/checkpoints/step_00000100/{state.pt, manifest.json}`` (plus ``sharded/``, the
model and optimizer shards written by every rank with torch.distributed.checkpoint, under FSDP).
A checkpoint exists only once its folder has been renamed from ``.tmp-step_...``; a process killed
mid-save leaves a temp folder that is ignored (and removed by the next save). ``manifest.json`` records the step and the
SHA-256 of each file, so a checkpoint corrupted later is detected on load and the previous one is
used instead, with a warning. If no checkpoint loads, ``CheckpointError`` says so: a run asked to
resume never silently restarts from step 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from toolbox.core.atomic import fsync_dir
from toolbox.core.errors import CheckpointError
from toolbox.core.output import write_error, write_failure

log = logging.getLogger(__name__)
_STEP_DIR = re.compile(r"^step_(\d{8})$")
STATE_FILE = "state.pt"
MANIFEST = "manifest.json"
SHARDED_DIR = "sharded"  # model and optimizer shards (torch.distributed.checkpoint) of an FSDP save


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Checkpointer:
    """Saves and loads a trainer's full state under ``<run_dir>/checkpoints``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.root = Path(run_dir) / "checkpoints"

    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write ``state`` as checkpoint ``step`` (one process; see ``begin``/``commit`` for many)."""
        return self.commit(step, self.begin(step, os.getpid()), state)

    def tmp_path(self, step: int, token: int | str) -> Path:
        """The temp folder of checkpoint ``step``; every rank of a sharded save agrees on ``token``."""
        return self.root / f".tmp-step_{step:08d}-{token}"

    def begin(self, step: int, token: int | str) -> Path:
        """Remove stale temp folders and create this save's (rank 0, before any rank writes)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.tmp_path(step, token)
        tmp.mkdir()
        return tmp

    def commit(self, step: int, tmp: Path, state: dict[str, Any]) -> Path:
        """Write ``state.pt`` into ``tmp``, then the manifest of every file in it, then rename (rank 0).

        Files other ranks wrote into ``tmp`` (the ``sharded/`` folder of an FSDP save) are part of
        the manifest, so a corrupted shard is detected like a corrupted ``state.pt``.
        """
        try:
            return self._write(step, tmp, state)
        except BaseException as e:  # a full disk, an interrupt: no half-written temp folder left
            shutil.rmtree(tmp, ignore_errors=True)
            failure = write_error(e)
            if failure is not None:
                raise write_failure(failure, tmp.parent / f"step_{step:08d}") from None
            raise

    def _write(self, step: int, tmp: Path, state: dict[str, Any]) -> Path:
        state_path = tmp / STATE_FILE
        with open(state_path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        files = {STATE_FILE: _sha256(state_path)}
        for file in sorted(tmp.rglob("*")):
            rel = file.relative_to(tmp).as_posix()
            if file.is_file() and rel not in (STATE_FILE, MANIFEST):
                files[rel] = _sha256(file)
        manifest = {"step": step, "files": files}
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        if (tmp / SHARDED_DIR).is_dir():
            fsync_dir(tmp / SHARDED_DIR)
        fsync_dir(tmp)
        final = self.root / f"step_{step:08d}"
        if final.exists():  # a rerun of the same step replaces it
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(self.root)
        return final

    def list(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        dirs = [p for p in self.root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
        return sorted(dirs, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))

    def prune(self, keep_last: int) -> list[Path]:
        """Remove all but the newest ``keep_last`` checkpoints; return the removed ones."""
        done = self.list()
        removed = done[:-keep_last] if keep_last > 0 else []
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed

    def load(self, path: str | Path) -> dict[str, Any]:
        """Load one checkpoint folder, verifying its checksums."""
        path = Path(path)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {MANIFEST}).")
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{manifest_path} is corrupt: {e}") from None
        for name, digest in manifest["files"].items():
            file = path / name
            if not file.is_file() or _sha256(file) != digest:
                raise CheckpointError(f"{file} is missing or corrupt (checksum mismatch).")
        with open(path / STATE_FILE, "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=False)
        if (path / SHARDED_DIR).is_dir():  # model and optimizer live there: the strategy loads them
            state[SHARDED_DIR] = str(path / SHARDED_DIR)
        return state

    def load_latest(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that loads; older ones are tried when newer ones are corrupt.

        Returns None when there is no checkpoint at all; raises CheckpointError when there are
        checkpoints but none of them loads.
        """
        candidates = self.list()
        errors = []
        for path in reversed(candidates):
            try:
                return path, self.load(path)
            except CheckpointError as e:
                log.warning("skipping checkpoint %s: %s", path, e)
                errors.append(str(e))
        if candidates:
            raise CheckpointError(
                "no usable checkpoint under "
                + str(self.root)
                + ":\n  "
                + "\n  ".join(errors)
                + "\nDelete the folder to start from scratch, or fix the files."
            )
        return None
