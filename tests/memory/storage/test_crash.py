"""SIGKILL during a burst of adds (with updates, deletes and index snapshots): the reopened store is
consistent: the index holds exactly SQLite's items, each with the vector of its current text, and
every change reported as done survived."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from toolbox.memory import EpisodicMemory
from toolbox.memory.embedders.hashing import HashingEmbedder

CHILD = textwrap.dedent(
    """
    import random, sys
    from toolbox.memory import EpisodicMemory
    path, index, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    m = EpisodicMemory(path, embedder={"name": "hashing", "dim": 32}, index=index, flush_every=5, max_items=150)
    n = len(m)
    while True:
        r = rng.random()
        if r < 0.8 or len(m) < 5:
            size = rng.randint(1, 6)
            ids = m.add_many([f"memory number {n + j} of seed {seed}" for j in range(size)], [{"n": n + j} for j in range(size)])
            n += size
            print("add", *ids, flush=True)
        elif r < 0.9:
            i = rng.choice(m.where({"n": {"gte": 0}}))
            m.update(i, text=f"updated memory {i} at {n}")
            print("update", i, flush=True)
        else:
            i = rng.choice(m.where({"n": {"gte": 0}}))
            m.delete(i)
            print("delete", i, flush=True)
    """
)


def run_and_kill(path, index: str, seed: int, ops: int) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), index, str(seed)], stdout=subprocess.PIPE, text=True, env=env
    )
    done = []
    try:
        while len(done) < ops:
            line = proc.stdout.readline()
            assert line, f"the writer died early (exit {proc.poll()})"
            done.append(line.split())
        time.sleep(seed % 5 * 0.013)  # somewhere inside a later change
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    done += [line.split() for line in rest.splitlines() if line.strip()]
    assert proc.returncode == -signal.SIGKILL
    return done


def check_consistent(path, index: str, done: list[list[str]]) -> None:
    m = EpisodicMemory(path, index=index)
    try:
        check = m.check()
        assert check["ok"], check
        items = list(m.items())
        ids = np.array([it.id for it in items], dtype=np.int64)
        if len(ids):
            stored = m.index.get(ids)
            fresh = HashingEmbedder(dim=32).embed([it.text for it in items])
            np.testing.assert_allclose(stored, fresh, atol=1e-6)  # every vector is its text's current one
        present = {it.id for it in items}
        deleted = {int(i) for op, *rest in done if op == "delete" for i in rest}
        for op, *rest in done:  # every change reported done survived (unless deleted or evicted later)
            for i in map(int, rest):
                history = [h["op"] for h in m.history(i)]
                assert history[0] == "add", (i, history)
                if op == "update":
                    assert "update" in history
                if i not in present:
                    assert history[-1] in ("delete", "evict") or i in deleted, (i, history)
        assert len(m) <= 150
    finally:
        m.close()


@pytest.mark.parametrize(("index", "seed"), [("exact", 1), ("exact", 3), ("hnsw", 4)])
def test_sigkill_during_adds_leaves_a_consistent_store(tmp_path, index, seed):
    path = tmp_path / "store"
    done = run_and_kill(path, index, seed, ops=30 + 7 * seed)
    check_consistent(path, index, done)
    done += run_and_kill(path, index, seed + 100, ops=20)  # reopen, write on, be killed again
    check_consistent(path, index, done)
