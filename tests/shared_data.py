"""Where the tests find the project's shared data sets (GSM8K, Cora), from any checkout.

``$TOOLBOX_SHARED_DATA`` when it is set; else ``../shared/data`` beside the checkout, the place
``/work/shared/data/README.md`` documents; for a git worktree (whose folder is elsewhere) also
``../shared/data`` beside its main checkout. A test that needs a file calls
:func:`require_shared_data`, which skips with the places it looked where the file is in none.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = "TOOLBOX_SHARED_DATA"


def shared_data_folders() -> list[Path]:
    """The folders searched, in order."""
    if os.environ.get(ENV):
        return [Path(os.environ[ENV]).expanduser()]
    roots = [REPO]
    try:  # a worktree's common git folder is its main checkout's .git
        common = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        common = ""
    if common and Path(common).name == ".git" and Path(common).parent.resolve() != REPO:
        roots.append(Path(common).parent.resolve())
    return [root.parent / "shared" / "data" for root in roots]


def shared_data_file(relative: str) -> Path | None:
    """``relative`` (e.g. ``gsm8k/train.jsonl``) in the first shared data folder that holds it."""
    return next((f / relative for f in shared_data_folders() if (f / relative).is_file()), None)


def require_shared_data(relative: str) -> Path:
    """The file, or a skip naming where it was looked for and how to point at it."""
    found = shared_data_file(relative)
    if found is None:
        places = ", ".join(str(f / relative) for f in shared_data_folders())
        pytest.skip(f"shared data {relative} not found (looked at {places}); set {ENV}=FOLDER")
    return found
