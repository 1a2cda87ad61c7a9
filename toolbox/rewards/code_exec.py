"""Code-execution reward: run the completion's program against the sample's tests, in a sandbox.

Each completion runs in its own ``python -I`` subprocess in an empty temporary folder, with
``resource.setrlimit`` limits on CPU seconds, address space (memory), file size and process count,
plus a wall-clock timeout that kills the process group. The program is the last fenced code block
of the completion (```` ```python ... ``` ````), or the whole completion when it has none; the
sample's tests (field ``tests``: Python source, typically ``assert`` lines, or a list of them)
are appended. The score is 1.0 when the process exits 0, else 0.0; with ``partial_credit`` each
test line runs on its own and the score is the fraction that pass.

This is a resource sandbox, not a security boundary: the code still runs as the same user with
the same file system. Run untrusted code in a container.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolbox.core.registries import REWARDS
from toolbox.rewards.base import Reward

FENCE_RE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
HARNESS = "import sys\nsys.setrecursionlimit(10000)\n"


def extract_code(completion: str) -> str:
    """The last fenced code block of ``completion``, or all of it when it has none."""
    blocks = FENCE_RE.findall(completion)
    return blocks[-1] if blocks else completion


def _limits(cpu_seconds: float, memory_mb: int) -> Any:
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        os.setsid()
        cpu = max(1, int(cpu_seconds + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024, 16 * 1024 * 1024))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(source: str, timeout: float = 5.0, memory_mb: int = 512) -> tuple[int | None, str]:
    """Run ``source`` in a limited subprocess; (exit code or None on timeout, the tail of stderr)."""
    with tempfile.TemporaryDirectory(prefix="toolbox_exec_") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w") as f:
            f.write(source)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", path],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_limits(timeout, memory_mb),
        )
        try:
            _, err = proc.communicate(timeout=timeout)
            return proc.returncode, err.decode(errors="replace")[-500:]
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            return None, "timeout"


@REWARDS.register("code_exec")
class CodeExecution(Reward):
    """1.0 when the completion's code passes the sample's tests in a limited subprocess, else 0.0.

    Args:
        tests_field: the sample field holding the tests (Python source, or a list of test lines).
        timeout: wall-clock (and CPU) seconds per program.
        memory_mb: address-space limit of the program, in MiB.
        partial_credit: run each test alone; the score is the fraction that pass.
        max_workers: programs run in parallel.
    """

    def __init__(
        self,
        tests_field: str = "tests",
        timeout: float = 5.0,
        memory_mb: int = 512,
        partial_credit: bool = False,
        max_workers: int = 2,
    ) -> None:
        self.tests_field = tests_field
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.partial_credit = partial_credit
        self.max_workers = max_workers
        self._timeouts = 0
        self._runs = 0

    def _score(self, completion: str, tests: Any) -> float | None:
        if tests is None:
            return None
        code = extract_code(completion)
        lines = list(tests) if isinstance(tests, list | tuple) else [str(tests)]
        groups = [[t] for t in lines] if self.partial_credit else [lines]
        passed = 0
        for group in groups:
            rc, _ = run_program(
                HARNESS + code + "\n\n" + "\n".join(group) + "\n", self.timeout, self.memory_mb
            )
            self._runs += 1
            self._timeouts += rc is None
            passed += rc == 0
        return passed / len(groups)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        if self.tests_field not in fields:
            raise KeyError(
                f"code_exec needs the field '{self.tests_field}'; the samples have {sorted(fields)}"
            )
        tests = fields[self.tests_field]
        with ThreadPoolExecutor(max_workers=max(1, self.max_workers)) as pool:
            return list(pool.map(self._score, completions, tests))

    def metrics(self) -> dict[str, float]:
        out = {"timeouts": float(self._timeouts), "runs": float(self._runs)}
        self._timeouts = self._runs = 0
        return out
