"""Fixtures of the workflow tests (helpers in workflow_copy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_copy import Workflow, copy_workflow


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Workflow:
    return copy_workflow(tmp_path / "repo")
