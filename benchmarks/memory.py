"""Episodic memory: vector-index libraries compared, and the store at 100k and 1M items.

Data: synthetic unit vectors of dimension 384 with the similarity profile of sentence embeddings
(1,000 clusters in a 32-dimensional latent space, projected to 384 dimensions plus isotropic noise;
a query's nearest neighbour has cosine ~0.38, a random pair ~0.0). Queries are fresh draws from the
same distribution, not stored items. Recall@10 is measured against exact search (a matmul).

Three parts, each printing (and writing with --out) one JSON object:

``libraries``: faiss-cpu ``IndexHNSWFlat``, hnswlib and usearch (float32 and int8) built on the
same N vectors with the same graph settings (M=16, ef_construction=100, all cores), then searched one
query at a time on one thread at several ``ef``: build rate, p50/p99 latency and recall@10.

``scale``: an ``EpisodicMemory`` store with the ``hnsw`` index, filled through ``add_many`` in
chunks (rows, history, FTS5 text index, pending log, index snapshots: the store's add throughput;
the index is built once), at each size in --sizes (one store grown through them, or with --cache
one saved store per size), searched one query at a time:
  - ``bare``: hnswlib's ``knn_query`` on the store's own graph (the library call),
  - ``index``: our ``HnswIndex.search`` (the same graph; ratio = our overhead),
  - ``store``: ``EpisodicMemory.search`` with a query vector, its rows answered from the resident
    copy of every row (``row_cache="all"``, the default; loaded by the first search, whose time and
    the RSS growth are ``resident_rows``), and ``store_sql``: the same with every hit read from
    SQLite (``row_cache=0``, what a store does for rows it does not hold),
  - ``exact``: ``ExactIndex.search`` (a matmul over all N),
  - ``filtered``: ``EpisodicMemory.search`` with a metadata filter matching ~10% of items (and its
    recall@10 against the exact top 10 among the matching items),
the first four interleaved: every (call, query) pair once per round, in a random order, so that
load swings and cache warmth hit all of them alike (``interleaved``); results are turned into ids
after the timing. ``--pin CORE`` times the searches on one core (the adds keep every core);
``--add-n N`` also times N adds into a fresh store (a saved store's add figures are those of the
run that built it, in ``DIR.build.json`` beside it), beside the time hnswlib's ``add_items`` took
inside them (``library_add_seconds``) and a bare hnswlib index given the same adds and saved once
(``bare_add_seconds``, ``bare_save_seconds``); ``--add-rounds R`` repeats that R times, alternating
which of the two goes first, and reports each figure's median over the rounds.

``overhead``: the bare hnswlib call, our index, the store and ``store_sql`` on one store's graph,
interleaved as above: p50/p99 of each and their ratios. ``benchmarks/memory_ab.py`` compares the
store's overhead of two versions of ``toolbox/`` on one saved store.

    python benchmarks/memory.py libraries --n 100000 --out benchmarks/results/memory_libraries.json
    nice -n 5 python benchmarks/memory.py scale --sizes 100000 1000000 --out benchmarks/results/memory_scale.json
    python benchmarks/memory.py overhead --n 50000 --out benchmarks/results/memory_overhead.json

``--cache DIR ...`` keeps each size's store in its DIR and reuses it when a later run finds it
there (``overhead`` opens it with its own index settings): a 1M store takes 8-40 min to build on a
shared 2-core machine, so build it once at low priority and time searches in later runs::

    nice -n 19 python benchmarks/memory.py scale --sizes 1000000 --M 16 --ef-construction 100 \\
        --flush-every 250000 --chunk 20000 --cache /work/bench/memory-1m --build-only
    python benchmarks/memory.py scale --sizes 100000 1000000 --cache /work/bench/memory-100k \\
        /work/bench/memory-1m --M 16 --ef-construction 100 --flush-every 250000 --queries 1000 \\
        --rounds 3 --ef 64 128 256 --filter-ef 64 --filter-queries 200 --exact-queries 30 \\
        --add-n 100000 --pin 1 --out benchmarks/results/memory_scale.json

The machine is shared: the JSON records the load average before and after each part.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

# single queries are matrix-vector products: a second BLAS thread only adds synchronisation (30x
# slower here when the cores are busy); set OPENBLAS_NUM_THREADS yourself to override
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384


def vectors(n: int, seed: int, noise: float = 8.0, clusters: int = 1000, latent: int = 32) -> np.ndarray:
    """``n`` clustered unit vectors (the same clusters and projection for every seed)."""
    w = np.random.default_rng(123).standard_normal((latent, DIM)).astype(np.float32)
    centers = np.random.default_rng(7).standard_normal((clusters, latent)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        z = centers[rng.integers(0, clusters, m)] + 0.5 * rng.standard_normal((m, latent)).astype(np.float32)
        x = z @ w + noise * rng.standard_normal((m, DIM)).astype(np.float32)
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def ground_truth(data: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Exact top-k ids of each query, in blocks (250 queries × 100k rows: ~100 MB at a time)."""
    out = np.zeros((len(queries), k), dtype=np.int64)
    for q0 in range(0, len(queries), 250):
        q = queries[q0 : q0 + 250]
        best_s = np.full((len(q), k), -np.inf, dtype=np.float32)
        best_i = np.zeros((len(q), k), dtype=np.int64)
        for start in range(0, len(data), 100_000):
            s = q @ data[start : start + 100_000].T
            top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            cat_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
            cat_i = np.concatenate([best_i, top + start], axis=1)
            keep = np.argpartition(-cat_s, k - 1, axis=1)[:, :k]
            best_s, best_i = np.take_along_axis(cat_s, keep, 1), np.take_along_axis(cat_i, keep, 1)
        out[q0 : q0 + len(q)] = best_i
    return out


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean(
            [
                len(set(f.tolist()) & set(t.tolist())) / truth.shape[1]
                for f, t in zip(found, truth, strict=True)
            ]
        )
    )


def timed(fn, queries: np.ndarray) -> tuple[dict, np.ndarray]:
    """Run ``fn(q)`` once per query (after 20 warm-up calls); p50/p99 in ms and the results."""
    for q in queries[:20]:
        fn(q)
    times, results = [], []
    for q in queries:
        t = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}, np.array(results)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# libraries ---------------------------------------------------------------------------------------
def bench_libraries(args) -> dict:
    threads = os.cpu_count() or 1
    data, queries = vectors(args.n, 0), vectors(args.queries, 99)
    truth = ground_truth(data, queries)
    ids = np.arange(args.n)
    out: dict = {"n": args.n, "dim": DIM, "queries": args.queries, "M": 16, "ef_construction": 100}
    out["load_before"] = load()
    results = {}

    def sweep(name, build, search, set_ef):
        t = time.perf_counter()
        build()
        rate = args.n / (time.perf_counter() - t)
        rows = []
        for ef in args.ef:
            set_ef(ef)
            lat, found = timed(search, queries)
            rows.append({"ef": ef, **lat, "recall_at_10": recall(found, truth)})
        results[name] = {"build_per_s": rate, "search": rows}
        print(name, json.dumps(results[name]), flush=True)

    for name, (build, search, set_ef) in _libraries(data, ids, threads).items():
        sweep(name, build, search, set_ef)
    out["results"] = results
    out["capabilities"] = {
        "hnswlib": "delete (mark_deleted, slots reused), update in place, filter predicate in knn_query",
        "faiss_hnsw_flat": "no remove_ids for HNSW (deletes need tombstones + rebuild); IDSelector filters",
        "usearch": "remove, no filter predicate in the Python search",
    }
    out["load_after"] = load()
    return out


def _libraries(data: np.ndarray, ids: np.ndarray, threads: int) -> dict:
    """name -> (build(), search(q) -> ids, set_ef(ef)) for each library, same graph settings."""
    import faiss
    import hnswlib
    from usearch.index import Index as UIndex

    h = hnswlib.Index(space="ip", dim=DIM)
    h.init_index(max_elements=len(data), M=16, ef_construction=100)
    f = faiss.IndexHNSWFlat(DIM, 16, faiss.METRIC_INNER_PRODUCT)
    f.hnsw.efConstruction = 100

    def faiss_build() -> None:
        faiss.omp_set_num_threads(threads)
        f.add(data)
        faiss.omp_set_num_threads(1)

    out = {
        "hnswlib": (
            lambda: h.add_items(data, ids, num_threads=threads),
            lambda q: h.knn_query(q, k=10, num_threads=1)[0][0],
            h.set_ef,
        ),
        "faiss_hnsw_flat": (
            faiss_build,
            lambda q: f.search(q[None, :], 10)[1][0],
            lambda ef: setattr(f.hnsw, "efSearch", ef),
        ),
    }
    for dtype in ("f32", "i8"):
        u = UIndex(ndim=DIM, metric="ip", dtype=dtype, connectivity=16, expansion_add=100)
        out[f"usearch_{dtype}"] = (
            lambda u=u: u.add(ids, data, threads=threads),
            lambda q, u=u: u.search(q, 10, threads=1).keys,
            lambda ef, u=u: setattr(u, "expansion_search", ef),
        )
    return out


# scale -------------------------------------------------------------------------------------------
class _AddClock:
    """A stand-in for an hnswlib index that forwards everything and times ``add_items``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds = 0.0

    def add_items(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self.inner.add_items(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.contextmanager
def pinned(cpu: int | None):
    """Run the block on core ``cpu`` alone (None: as the process runs); adds before it keep all cores."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def rss_mib() -> float:
    """This process's resident memory (Linux ``/proc/self/statm``; NaN elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return float("nan")


def open_store(folder: Path, args, spec: dict | None):
    """The benchmark's store in ``folder`` (hashing embedder: the vectors are given)."""
    from toolbox.memory import EpisodicMemory

    return EpisodicMemory(
        folder,
        embedder={"name": "hashing", "dim": DIM},
        index=spec,
        cache=False,
        index_fields=["topic"],
        **({} if args.flush_every is None else {"flush_every": args.flush_every}),
    )


def fill(store, data: np.ndarray, topics: np.ndarray, stop: int, chunk: int) -> dict:
    """Add items ``len(store)..stop`` through ``add_many``; the store's add rate and hnswlib's share."""
    clock = _AddClock(store.index._index)
    store.index._index = clock  # times hnswlib's add_items inside our adds
    start, t0 = len(store), time.perf_counter()
    try:
        for lo in range(start, stop, chunk):
            hi = min(stop, lo + chunk)
            store.add_many(
                [f"memory {i} about topic {topics[i]}" for i in range(lo, hi)],
                [{"topic": int(topics[i])} for i in range(lo, hi)],
                vectors=data[lo:hi],
            )
            if (lo // chunk) % 10 == 0:
                print(f"{hi} added, {time.perf_counter() - t0:.0f}s", flush=True)
        store.flush()
    finally:
        store.index._index = clock.inner
    seconds = time.perf_counter() - t0
    return {
        "items_added": stop - start,
        "store_add_per_s": (stop - start) / seconds,
        "store_add_seconds": seconds,
        "library_add_seconds": clock.seconds,
        "store_add_over_library_add": seconds / clock.seconds,
    }


def bare_fill(data: np.ndarray, stop: int, chunk: int, args, folder: Path) -> dict:
    """The bare library doing the same adds: one hnswlib index (the store's space and graph
    settings, sized up front), ``add_items`` in the same chunks on every core, then one
    ``save_index`` (fsynced) to persist it: the store's adds against the library's, with and
    without the one write that makes the library's index survive a restart."""
    import hnswlib

    h = hnswlib.Index(space="cosine", dim=DIM)
    h.init_index(max_elements=stop, M=args.M, ef_construction=args.ef_construction)
    threads = os.cpu_count() or 1
    t0 = time.perf_counter()
    for lo in range(0, stop, chunk):
        hi = min(stop, lo + chunk)
        h.add_items(data[lo:hi], np.arange(lo, hi), num_threads=threads)
    add = time.perf_counter() - t0
    t0 = time.perf_counter()
    path = folder / "bare.bin"
    h.save_index(str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"bare_add_seconds": add, "bare_save_seconds": time.perf_counter() - t0}


def add_round(data: np.ndarray, topics: np.ndarray, spec: dict, args, store_first: bool) -> dict:
    """One fresh store filled with ``--add-n`` items and one bare hnswlib index given the same adds
    (in the order ``store_first`` says), and their ratios."""
    tmp = Path(tempfile.mkdtemp(prefix="memory-bench-add-", dir=args.tmp))
    try:
        add: dict = {"load_before": load(), "store_first": store_first}
        if not store_first:
            add.update(bare_fill(data, args.add_n, args.chunk, args, tmp))
        store = open_store(tmp / "store", args, spec)
        add.update(fill(store, data, topics, args.add_n, args.chunk))
        store.close()
        if store_first:
            add.update(bare_fill(data, args.add_n, args.chunk, args, tmp))
        add["store_add_over_bare_add"] = add["store_add_seconds"] / add["bare_add_seconds"]
        add["store_add_over_bare_add_and_save"] = add["store_add_seconds"] / (
            add["bare_add_seconds"] + add["bare_save_seconds"]
        )
        add["load_after"] = load()
        return add
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_rounds(data: np.ndarray, topics: np.ndarray, spec: dict, args) -> dict:
    """``--add-rounds`` rounds of ``add_round``, alternating which goes first (a machine that slows
    or speeds up over a run then favours neither); each figure is the median over the rounds (each
    ratio the median of the rounds' ratios), the rounds themselves under ``rounds``."""
    rounds = [add_round(data, topics, spec, args, store_first=r % 2 == 0) for r in range(args.add_rounds)]
    numbers = [k for k, v in rounds[0].items() if isinstance(v, float | int) and not isinstance(v, bool)]
    return {
        "items_added": rounds[0]["items_added"],
        **{k: statistics.median(r[k] for r in rounds) for k in numbers if k != "items_added"},
        "rounds": rounds,
    }


def bench_scale(args) -> dict:
    """The store at each of ``--sizes``: one store grown through them, or one cached store each."""
    sizes = sorted(args.sizes)
    out: dict = {
        "dim": DIM,
        "queries": args.queries,
        "rounds": args.rounds,
        "index": {"name": "hnsw", "M": args.M, "ef_construction": args.ef_construction},
        "flush_every": args.flush_every,
        "cpus": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "searches_pinned_to_core": args.pin,
        "note": f"this process at nice {os.nice(0)}",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "sizes": {},
    }
    if args.cache and len(args.cache) != len(sizes):
        raise SystemExit(f"--cache takes one folder per size ({len(sizes)} sizes, {len(args.cache)} folders)")
    queries = vectors(args.queries, 99)
    data = vectors(max(sizes[-1], args.add_n), 0)
    topics = np.random.default_rng(5).integers(0, 10, len(data))  # the filter field: ~10% per value
    spec = {"name": "hnsw", "M": args.M, "ef_construction": args.ef_construction}
    if args.add_n:  # the add rate on a fresh store (a cached store's comes from the run that built it)
        out["add"] = add_rounds(data, topics, spec, args)
        print("add:", json.dumps(out["add"]), flush=True)
    grown = None if args.cache else Path(tempfile.mkdtemp(prefix="memory-bench-", dir=args.tmp))
    store = None
    try:
        for j, n in enumerate(sizes):
            row: dict = {"load_before": load()}
            folder = Path(args.cache[j]) if args.cache else grown
            if store is None or args.cache:
                t_open = time.perf_counter()
                store = open_store(folder, args, spec)
                row["open_seconds"] = time.perf_counter() - t_open
            if len(store) > n:
                raise SystemExit(f"the store {folder} holds {len(store)} items, more than {n}")
            record = folder.parent / f"{folder.name}.build.json"
            if len(store) == n and args.cache:  # reused: the add figures are those of its build
                row["cached_store"] = str(folder)
                if record.exists():
                    row["build"] = json.loads(record.read_text())
            else:  # built here (a cached store cut short is filled up from where it stopped)
                row.update(fill(store, data, topics, n, args.chunk))
                row["store_bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
                if args.cache:  # a later run on this store reports how it was built
                    build = {**row, "load_after": load(), "nice": os.nice(0), "command": " ".join(sys.argv)}
                    write_json(str(record), build)
            if not args.build_only:
                with pinned(args.pin):
                    row.update(measure(store, data[:n], topics[:n], queries, args))
            row["load_after"] = load()
            out["sizes"][str(n)] = row
            print(f"n={n}:", json.dumps({k: v for k, v in row.items() if k != "search"}), flush=True)
            if args.out:  # each size as soon as it is done: the 1M part takes long
                write_json(args.out, out)
            if args.cache:
                store.close()
                store = None
    finally:
        if store is not None:
            store.close()
        if grown is not None:
            shutil.rmtree(grown, ignore_errors=True)
    return out


def labels_to_rows(index, labels: np.ndarray) -> np.ndarray:
    """hnswlib labels -> rows of data (each insert has its own label; item id = row + 1)."""
    return index._id[np.asarray(labels, dtype=np.int64)] - 1


def interleaved(
    calls: dict, queries: np.ndarray, rounds: int, seed: int, warm: np.ndarray | None = None
) -> tuple[dict, dict]:
    """Every (call, query) pair once per round, in a random order, so that load swings and cache
    warmth (the same query twice in a row runs faster) hit every call alike; each call warmed up
    first on ``warm`` (default: the first 20 queries). Returns ``{name: {p50_ms, p99_ms}}`` and each
    call's results of round one (untouched: a result is turned into ids after the timing)."""
    for fn in calls.values():
        for q in queries[:20] if warm is None else warm:
            fn(q)
    times: dict[str, list[float]] = {name: [] for name in calls}
    results: dict[str, list] = {name: [None] * len(queries) for name in calls}
    rng = np.random.default_rng(seed)
    jobs = [(name, j) for name in calls for j in range(len(queries))]
    for r in range(rounds):
        for k in rng.permutation(len(jobs)):
            name, j = jobs[k]
            fn, q = calls[name], queries[j]
            t = time.perf_counter()
            result = fn(q)
            times[name].append(time.perf_counter() - t)
            if r == 0:
                results[name][j] = result
    lat = {}
    for name, v in times.items():
        ms = np.array(v) * 1e3
        lat[name] = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}
    return lat, results


def store_calls(store) -> dict:
    """The bare hnswlib call, our index and the store on the same graph: ``store`` answers from its
    resident rows (``row_cache="all"``, the default), ``store_sql`` reads every hit from SQLite
    (``row_cache=0``: what a store without resident rows does for rows it has not cached)."""
    from toolbox.memory.storage.row_cache import RowCache

    index, graph = store.index, store.index._index
    resident, sql = store._cache, RowCache(store._rows, 0)

    def with_rows(rows):
        def search(q):
            store._cache = rows
            return store.search(q, k=10)

        return search

    return {
        "bare": lambda q: graph.knn_query(q, k=10, num_threads=1),
        "index": lambda q: index.search(q, 10),
        "store": with_rows(resident),
        "store_sql": with_rows(sql),
    }


def measure(store, data: np.ndarray, topics: np.ndarray, queries: np.ndarray, args) -> dict:
    """Search latency and recall of the bare graph, our index, the store, exact and filtered search."""
    from toolbox.memory.index.exact import ExactIndex

    n = len(data)
    truth = ground_truth(data, queries)
    index = store.index
    assert len(index) == n  # item ids are 1..n: id - 1 is the row of data
    row: dict = {"search": []}
    rss, t = rss_mib(), time.perf_counter()  # the first search loads the resident rows
    store.search(queries[0], k=10)
    row["resident_rows"] = {
        "load_seconds": time.perf_counter() - t,
        "resident_rows_mib": rss_mib() - rss,  # RSS growth (SQLite's page cache filling included)
        **store._cache.stats(),
    }
    resident = store._cache
    calls = store_calls(store)
    to_rows = {
        "bare": lambda r: labels_to_rows(index, r[0][0]),
        "index": lambda r: r[0][0] - 1,
        "store": lambda r: np.array([it.id - 1 for it in r]),
        "store_sql": lambda r: np.array([it.id - 1 for it in r]),
    }
    for ef in args.ef:
        index.ef_search = ef
        index._index.set_ef(ef)
        lat, results = interleaved(calls, queries, args.rounds, ef)
        entry: dict = {"ef": ef}
        for name in calls:
            found = [to_rows[name](r) for r in results[name]]
            entry[name] = {**lat[name], "recall_at_10": recall(found, truth)}
            if name != "bare":
                entry[f"{name}_over_bare_p50"] = lat[name]["p50_ms"] / lat["bare"]["p50_ms"]
                entry[f"{name}_over_bare_p99"] = lat[name]["p99_ms"] / lat["bare"]["p99_ms"]
        row["search"].append(entry)
        print(f"n={n} ef={ef}:", json.dumps(entry), flush=True)
    store._cache = resident
    row["resident_rows"]["after"] = resident.stats()
    # a broad filter (~10% of the items, above exact_below): the graph oversampled, then SQL-filtered
    index.ef_search = args.filter_ef
    fq = queries[: args.filter_queries]
    rows3 = np.flatnonzero(topics == 3)
    filtered_lat, filtered_found = timed(
        lambda q: np.array([it.id - 1 for it in store.search(q, k=10, filters={"topic": 3})]), fq
    )
    filtered_truth = rows3[ground_truth(data[rows3], fq)]
    row["filtered_store_search"] = {
        "filter": {"topic": 3},
        "matching": len(rows3),
        "exact_below": index.exact_below,
        "path": "oversampled graph + SQL post-filter" if len(rows3) > index.exact_below else "exact",
        "queries": args.filter_queries,
        "ef": args.filter_ef,
        **filtered_lat,
        "recall_at_10": recall(filtered_found, filtered_truth),
    }
    print(f"n={n} filtered:", json.dumps(row["filtered_store_search"]), flush=True)
    exact = ExactIndex.from_arrays(np.arange(n, dtype=np.int64), data)
    exact_lat, exact_found = timed(lambda q: exact.search(q, 10)[0][0], queries[: args.exact_queries])
    row["exact"] = {
        **exact_lat,
        "queries": args.exact_queries,
        "recall_at_10": recall(exact_found, truth[: args.exact_queries]),
    }
    return row


def bench_overhead(args) -> dict:
    """Our index and our store against the bare hnswlib call on the same graph, timed interleaved."""
    data, queries = vectors(args.n, 0), vectors(args.queries, 99)
    topics = np.random.default_rng(5).integers(0, 10, args.n)
    folder = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="memory-bench-", dir=args.tmp))
    out: dict = {"n": args.n, "queries": args.queries, "rounds": args.rounds, "load_before": load()}
    try:
        # a cached store is opened with its own index settings (another spec would rebuild its
        # graph), so a store built by ``scale --cache`` serves here too
        reuse = (folder / "memory.sqlite").exists()
        spec = None if reuse else {"name": "hnsw", "ef_construction": args.ef_construction}
        store = open_store(folder, args, spec)
        out["index_spec"] = store.index_spec
        if len(store) not in (0, args.n):
            raise SystemExit(f"the cached store {folder} holds {len(store)} items, not {args.n}")
        if len(store) < args.n:
            fill(store, data, topics, args.n, 10_000)
        store.search(queries[0], k=10)  # loads the resident rows
        calls = store_calls(store)
        resident = store._cache
        out["ef"] = {}
        for ef in args.ef:
            store.index.ef_search = ef
            store.index._index.set_ef(ef)
            lat, _ = interleaved(calls, queries, args.rounds, ef)
            out["ef"][str(ef)] = {
                **{f"{name}_p50_ms": v["p50_ms"] for name, v in lat.items()},
                **{f"{name}_p99_ms": v["p99_ms"] for name, v in lat.items()},
                **{
                    f"{name}_over_bare_p50": v["p50_ms"] / lat["bare"]["p50_ms"]
                    for name, v in lat.items()
                    if name != "bare"
                },
            }
            print(f"ef={ef}:", json.dumps(out["ef"][str(ef)]), flush=True)
        store._cache = resident
        out["resident_rows"] = resident.stats()
        store.close()
    finally:
        if not args.cache:
            shutil.rmtree(folder, ignore_errors=True)
    out["load_after"] = load()
    return out


def write_json(path: str, result: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="part", required=True)
    lib = sub.add_parser("libraries")
    lib.add_argument("--n", type=int, default=100_000)
    lib.add_argument("--queries", type=int, default=500)
    lib.add_argument("--ef", type=int, nargs="+", default=[32, 64, 128])
    lib.add_argument("--out")
    sc = sub.add_parser("scale")
    sc.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    sc.add_argument("--queries", type=int, default=1000)
    sc.add_argument("--exact-queries", type=int, default=200)
    sc.add_argument("--ef", type=int, nargs="+", default=[64, 128, 256])
    sc.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the queries per ef")
    sc.add_argument("--add-n", type=int, default=0, help="also time adding this many items to a fresh store")
    sc.add_argument("--pin", type=int, help="time the searches on this core alone (adds use every core)")
    sc.add_argument("--filter-ef", type=int, default=128)
    sc.add_argument("--filter-queries", type=int, default=30)
    sc.add_argument("--chunk", type=int, default=10_000)
    sc.add_argument(
        "--add-rounds", type=int, default=1, help="rounds of --add-n adds, store and bare alternating first"
    )
    sc.add_argument("--M", type=int, default=16, help="hnsw graph degree")
    sc.add_argument("--ef-construction", type=int, default=100, help="hnsw build candidate list")
    sc.add_argument(
        "--flush-every",
        type=int,
        default=None,
        help="the store's flush_every (snapshot interval; default: the store's)",
    )
    sc.add_argument("--tmp", default=None, help="folder for the temporary stores (default: the system's)")
    sc.add_argument(
        "--cache",
        nargs="+",
        help="one folder per size: keep each store there, and reuse it when a run finds it there",
    )
    sc.add_argument("--build-only", action="store_true", help="fill the store (--cache), measure nothing")
    sc.add_argument("--out")
    ov = sub.add_parser("overhead", help="our index and store vs the bare hnswlib call, timed in pairs")
    ov.add_argument("--n", type=int, default=50_000)
    ov.add_argument("--queries", type=int, default=500)
    ov.add_argument("--rounds", type=int, default=3)
    ov.add_argument("--ef", type=int, nargs="+", default=[64, 256])
    ov.add_argument("--ef-construction", type=int, default=100)
    ov.add_argument("--flush-every", type=int, default=10**9)
    ov.add_argument("--tmp", default=None)
    ov.add_argument("--cache", help="keep the store in this folder and reuse it when a run finds it there")
    ov.add_argument("--out")
    args = p.parse_args()
    parts = {"libraries": bench_libraries, "scale": bench_scale, "overhead": bench_overhead}
    result = parts[args.part](args)
    result["command"] = "python benchmarks/memory.py " + " ".join(sys.argv[1:])
    result["commit"] = _commit()
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2))


def _commit() -> str | None:
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    main()
