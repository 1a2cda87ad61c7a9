"""A fresh clone evaluates offline: ``git clone`` of this repository (its committed HEAD) into a
temporary folder, then ``toolbox eval --run DIR backend=lm_eval|inspect_ai task=arithmetic`` from the
clone's code (the existing environment's packages), with the hub variables offline, every connection
and name lookup outside loopback recorded and refused (a ``sitecustomize`` of the child process),
and, where the machine allows ``unshare -rn``, in a network namespace of its own (no network at all)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval.harness_util import trained_exact_match

pytest.importorskip("lm_eval")
pytest.importorskip("inspect_ai")

REPO = Path(__file__).resolve().parents[2]

GUARD = """
import os, socket
LOCAL = ("127.0.0.1", "::1", "localhost", socket.gethostname())
def _refuse(what):
    with open(os.environ["NETWORK_LOG"], "a") as log:
        log.write(repr(what) + "\\n")
    raise ConnectionRefusedError(f"offline test: network call to {what}")
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
def _guarded_connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host not in LOCAL and self.family != socket.AF_UNIX:
        _refuse(address)
    return _connect(self, address)
def _guarded_getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if name is not None and name not in LOCAL:
        _refuse(name)
    return _getaddrinfo(host, *args, **kwargs)
socket.socket.connect = _guarded_connect
socket.getaddrinfo = _guarded_getaddrinfo
"""


def _isolated() -> list[str]:
    """``unshare -rn`` where it works here (a user and network namespace), else nothing."""
    if shutil.which("unshare") is None:
        return []
    ok = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode == 0
    return ["unshare", "-rn"] if ok else []


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    folder = tmp_path_factory.mktemp("fresh") / "toolbox"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(folder)], check=True, timeout=300)
    return folder


def test_fresh_clone_runs_both_backends_offline(clone, demo_short, tmp_path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    network_log = tmp_path / "network.log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{guard}{os.pathsep}{clone}",
        "NETWORK_LOG": str(network_log),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),  # an empty cache: nothing downloaded before is used
        "INSPECT_LOG_DIR": str(tmp_path / "inspect_logs"),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import toolbox; print(toolbox.__file__)"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(clone), where.stdout + where.stderr
    own = trained_exact_match(demo_short)
    for backend in ("lm_eval", "inspect_ai"):
        out = tmp_path / f"{backend}.json"
        cmd = [
            *_isolated(), sys.executable, "-m", "toolbox.cli", "eval", "--run", str(demo_short),
            "--out", str(out), f"backend={backend}", "task=arithmetic",
        ]  # fmt: skip
        done = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(out.read_text()) == {f"eval/{backend}/arithmetic/exact_match": own}
    assert not network_log.exists(), network_log.read_text()
