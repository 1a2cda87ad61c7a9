"""Old code against new on one saved store: the store's search over the bare hnswlib call.

Each round runs one worker process per side, in alternating order (the old side first in odd
rounds): the old side imports ``toolbox/`` exported from git at ``--old`` (``git archive``), the new
side this checkout's. A worker opens the store with its defaults (the folder's lock lets one open
it at a time), warms up on queries of its own, then times the bare hnswlib call
(``knn_query(q, k=10)`` on the store's own graph) and ``EpisodicMemory.search(q, k=10)``
interleaved (``benchmarks/memory.py``'s ``interleaved``), each on queries no earlier round or ef
asked: fresh questions, whose rows no cache of recent rows holds. The ratio of the two p50s is the
store's overhead on each side; the rounds' spread shows the noise.

    taskset -c 1 python benchmarks/memory_ab.py --old fc561c5 --cache /work/bench/memory-100k \\
        --ef 64 128 256 --rounds 3 --queries 500 --out benchmarks/results/memory_ab_100k.json
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from memory import DIM, _commit, interleaved, load, vectors, write_json  # noqa: E402


def worker(args) -> dict:
    """One side: open the store, time bare and store interleaved at each ef, print JSON."""
    import toolbox
    from toolbox.memory import EpisodicMemory

    t = time.perf_counter()
    store = EpisodicMemory(
        args.cache, embedder={"name": "hashing", "dim": DIM}, cache=False, flush_every=10**9
    )
    out: dict = {"toolbox": str(Path(toolbox.__file__).parent), "open_seconds": time.perf_counter() - t}
    out["row_cache"] = store.stats().get("row_cache")
    graph, index = store.index._index, store.index
    warm = vectors(50, 5000 + args.round)
    for q in warm:  # the new side's resident rows load here
        store.search(q, k=10)
    out["ef"] = {}
    for j, ef in enumerate(args.ef):
        index.ef_search = ef
        graph.set_ef(ef)
        queries = vectors(args.queries, 1000 + 100 * args.round + j)  # asked by no other round or ef
        calls = {
            "bare": lambda q: graph.knn_query(q, k=10, num_threads=1),
            "store": lambda q: store.search(q, k=10),
        }
        lat, _ = interleaved(calls, queries, 1, ef, warm=warm)
        out["ef"][str(ef)] = {**lat, "store_over_bare_p50": lat["store"]["p50_ms"] / lat["bare"]["p50_ms"]}
    out["row_cache_after"] = store.stats().get("row_cache")
    store.close()
    return out


def export_old(rev: str, into: Path) -> Path:
    """``toolbox/`` at git revision ``rev``, exported into ``into``."""
    archive = subprocess.run(
        ["git", "archive", rev, "toolbox"], cwd=HERE.parent, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", help="git revision of the old side")
    p.add_argument("--cache", required=True, help="a store built by memory.py scale --cache")
    p.add_argument("--ef", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out")
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if not args.old:
        raise SystemExit("--old REV: the git revision to compare with")
    out: dict = {
        "cache": args.cache,
        "old": subprocess.run(
            ["git", "rev-parse", args.old], cwd=HERE.parent, capture_output=True, text=True, check=True
        ).stdout.strip(),
        "new": _commit(),
        "new_dirty": bool(
            subprocess.run(
                ["git", "status", "--porcelain", "toolbox"], cwd=HERE.parent, capture_output=True, text=True
            ).stdout.strip()
        ),
        "queries": args.queries,
        "ef": args.ef,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "nice": os.nice(0),
        "load_before": load(),
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="memory-ab-") as tmp:
        roots = {"old": export_old(args.old, Path(tmp)), "new": HERE.parent}
        for r in range(args.rounds):
            sides = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            row: dict = {"order": sides, "load": load()}
            for side in sides:
                env = {**os.environ, "PYTHONPATH": str(roots[side])}
                cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--round", str(r)]
                cmd += ["--cache", args.cache, "--queries", str(args.queries), "--ef", *map(str, args.ef)]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                row[side] = json.loads(done.stdout.strip().splitlines()[-1])
                ratios = {ef: v["store_over_bare_p50"] for ef, v in row[side]["ef"].items()}
                print(f"round {r} {side}: store/bare p50 {json.dumps(ratios)}", flush=True)
            out["rounds"].append(row)
    out["summary"] = {
        side: {
            str(ef): [round(row[side]["ef"][str(ef)]["store_over_bare_p50"], 3) for row in out["rounds"]]
            for ef in args.ef
        }
        for side in ("old", "new")
    }
    out["load_after"] = load()
    out["command"] = "python benchmarks/memory_ab.py " + " ".join(sys.argv[1:])
    print(json.dumps(out["summary"], indent=2))
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
