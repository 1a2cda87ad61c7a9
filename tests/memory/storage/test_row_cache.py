"""The rows searches answer from memory (every row, ``row_cache="all"``, or a bounded LRU of them):
a search never returns a row that differs from SQLite's, whatever changed it (update, delete,
delete_where, eviction, a merged duplicate, the lru clock, another SQLite connection), the bounded
cache stays within its size, and the resident copy reads SQLite only when it has to."""

from __future__ import annotations

import random
import sqlite3

import numpy as np
import pytest

from toolbox.core.errors import ConfigError
from toolbox.memory import EpisodicMemory, MemoryStoreError
from toolbox.memory.storage.row_store import item_fields

HASH = {"name": "hashing", "dim": 32}
WORDS = "cat dog mat sofa paris river budget notes meeting review market stock".split()
ROW_FIELDS = ("id", "text", "metadata", "timestamp", "importance", "created_at", "updated_at", "accessed_at")


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))


def fields(item) -> tuple:
    return tuple(getattr(item, f) for f in ROW_FIELDS)


def assert_search_agrees_with_sqlite(m: EpisodicMemory, query: str) -> list:
    """Every item a search returns equals the row SQLite holds (read past the cache), and so does
    every row the cache holds after it. Under ``lru`` a search returns its items as they were
    before it used them: their ``accessed_at`` is the one before, SQLite's is the search's time."""
    found = m.search(query, k=len(m) or 1)
    n = len(ROW_FIELDS) - (m.eviction == "lru")
    for item in found:
        stored = m._rows.get(item.id)
        assert stored is not None, f"search returned item {item.id}, which SQLite no longer holds"
        assert fields(item)[:n] == fields(stored)[:n], item.id
    cached = m._cache.held()
    assert cached == {row[0]: item_fields(row) for row in m._rows.fetch_rows(list(cached))}
    return found


KINDS = ["all", 10_000]  # every row resident (the default), a bounded LRU


@pytest.mark.parametrize("row_cache", KINDS)
@pytest.mark.parametrize(
    ("eviction", "seed"), [("oldest", 0), ("lru", 1), ("importance", 2), ("lru", 3), ("oldest", 4)]
)
def test_no_search_returns_a_stale_row_after_any_change(tmp_path, eviction, seed, row_cache):
    rng = random.Random(seed)
    m = EpisodicMemory(
        tmp_path,
        embedder=HASH,
        max_items=25,
        eviction=eviction,
        dedupe="merge",
        dedupe_threshold=0.97,
        row_cache=row_cache,
    )
    m.add_many([sentence(rng) for _ in range(20)], [{"n": i} for i in range(20)])
    ops = {"add": 0, "update": 0, "delete": 0, "delete_where": 0, "get": 0, "outside": 0}
    for step in range(120):
        found = assert_search_agrees_with_sqlite(m, sentence(rng))  # fills the cache with those rows
        ids = [it.id for it in found] or m.where({"n": {"gte": -1}})
        r = rng.random()
        if r < 0.3 or not ids:
            m.add(sentence(rng), metadata={"n": step, "s": step % 3}, importance=rng.random())
            ops["add"] += 1
        elif r < 0.55:
            m.update(
                rng.choice(ids),
                text=sentence(rng) if rng.random() < 0.5 else None,
                metadata={"n": step, "u": True},
                timestamp=1000.0 + step if rng.random() < 0.5 else None,
                importance=rng.random() if rng.random() < 0.5 else None,
            )
            ops["update"] += 1
        elif r < 0.65:
            assert m.delete(rng.choice(ids))
            ops["delete"] += 1
        elif r < 0.7:
            m.delete_where({"s": step % 3})
            ops["delete_where"] += 1
        elif r < 0.85:
            got = m.get(rng.choice(ids))
            n = len(ROW_FIELDS) - (eviction == "lru")  # get returns the item as it was before it
            assert got is None or fields(got)[:n] == fields(m._rows.get(got.id))[:n]
            ops["get"] += 1
        else:  # another SQLite connection rewrites a cached row behind the store's back
            con = sqlite3.connect(tmp_path / "memory.sqlite")
            con.execute(
                "UPDATE items SET importance = ?, metadata = '{\"n\": -1}' WHERE id = ?", (9.5, ids[0])
            )
            con.commit()
            con.close()
            ops["outside"] += 1
    assert_search_agrees_with_sqlite(m, sentence(rng))
    assert all(v > 0 for v in ops.values()), ops  # every kind of change ran
    assert m.stats()["row_cache"]["hits"] > 0  # the cache was used, not bypassed
    m.close()


@pytest.mark.parametrize("row_cache", KINDS)
def test_each_change_is_seen_by_the_next_search(tmp_path, row_cache):
    m = EpisodicMemory(
        tmp_path, embedder=HASH, max_items=3, dedupe="merge", dedupe_threshold=0.99, row_cache=row_cache
    )
    a = m.add("the cat sat on the mat", metadata={"v": 1}, timestamp=10.0)
    b = m.add("the dog slept on the sofa", metadata={"v": 1}, timestamp=20.0)
    [hit] = m.search("cat on the mat", k=1)
    assert hit.id == a and a in m._cache
    m.update(a, metadata={"v": 2}, importance=3.0)
    [hit] = m.search("cat on the mat", k=1)
    assert (hit.metadata, hit.importance) == ({"v": 2}, 3.0)
    m.update(a, text="the cat sat on the warm mat")
    assert m.search("cat on the mat", k=1)[0].text == "the cat sat on the warm mat"
    m.add("The cat sat on the warm mat!", metadata={"w": 5}, timestamp=30.0)  # merged into a
    [hit] = m.search("cat on the mat", k=1)
    assert hit.metadata == {"v": 2, "w": 5} and hit.timestamp == 30.0
    hit.metadata["v"] = 99  # a caller changing what it got does not change the next answer
    assert m.search("cat on the mat", k=1)[0].metadata == {"v": 2, "w": 5}
    m.search("dog on the sofa", k=2)
    c = m.add("paris is the capital of france", timestamp=40.0)
    assert b in m._cache
    d = m.add("water boils at one hundred degrees", timestamp=50.0)  # evicts b (the oldest)
    assert b not in m._cache and {it.id for it in m.search("dog on the sofa", k=5)} == {a, c, d}
    m.delete(a)
    assert a not in {it.id for it in m.search("cat on the mat", k=5)}
    assert m.delete_where({"v": {"exists": False}}) == 2 and m.search("paris", k=5) == []
    m.close()


@pytest.mark.parametrize("row_cache", KINDS)
def test_the_lru_clock_moves_in_the_cached_rows(tmp_path, row_cache):
    m = EpisodicMemory(tmp_path, embedder=HASH, eviction="lru", row_cache=row_cache)
    a = m.add("the cat sat on the mat")
    first = m.search("cat on the mat", k=1)[0]
    assert first.accessed_at is None  # the item as it was before this search used it
    clock = m._rows.get(a).accessed_at  # the first search's time
    second = m.search("cat on the mat", k=1)[0]
    assert clock is not None and second.accessed_at == clock  # from the cache, and current
    assert m._rows.get(a).accessed_at > clock
    # the second search read no row: the bounded cache kept the first's, the resident copy all
    assert m.stats()["row_cache"]["misses"] == (1 if row_cache != "all" else 0)


@pytest.mark.parametrize("row_cache", KINDS)
def test_a_failed_touch_leaves_no_claim_in_the_cache(tmp_path, monkeypatch, row_cache):
    m = EpisodicMemory(tmp_path, embedder=HASH, eviction="lru", row_cache=row_cache)
    a = m.add("the cat sat on the mat")
    m.search("cat on the mat", k=1)
    assert a in m._cache

    def fail(ids, now):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(m._rows, "touch", fail)
    with pytest.raises(sqlite3.OperationalError):
        m.get(a)
    assert a not in m._cache
    monkeypatch.undo()
    m.close()


def test_the_cache_is_bounded_and_can_be_off(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, row_cache=3)
    m.add_many([f"memory number {i} about {w}" for i, w in enumerate(WORDS)])
    cached = {}
    for w in WORDS:
        cached[w] = [fields(it) + (it.score,) for it in m.search(w, k=5)]
        assert len(m._cache) <= 3
    m.close()
    off = EpisodicMemory(tmp_path, row_cache=0)
    for w in WORDS:  # the same answers read from SQLite every time
        assert [fields(it) + (it.score,) for it in off.search(w, k=5)] == cached[w]
    assert len(off._cache) == 0
    off.close()
    resident = EpisodicMemory(tmp_path, row_cache="all")
    for w in WORDS:  # the same answers from the resident copy
        assert [fields(it) + (it.score,) for it in resident.search(w, k=5)] == cached[w]
    assert len(resident._cache) == len(WORDS)
    resident.close()
    for bad in (-1, "some"):
        with pytest.raises(ConfigError, match="memory.row_cache: expected 'all'.*got"):
            EpisodicMemory(tmp_path, row_cache=bad)


def test_one_store_object_per_folder_and_a_reopen_starts_empty(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH)
    a = m.add("the cat sat on the mat", metadata={"v": 1})
    m.search("cat", k=1)
    # a second object on the same folder (this process or another) is refused while one is open:
    # no other store can change the rows behind this one's cache
    with pytest.raises(MemoryStoreError, match="open in another process"):
        EpisodicMemory(tmp_path)
    m.close()
    con = sqlite3.connect(tmp_path / "memory.sqlite")  # changed while no store is open
    con.execute("UPDATE items SET metadata = '{\"v\": 2}' WHERE id = ?", (a,))
    con.commit()
    con.close()
    again = EpisodicMemory(tmp_path)
    assert len(again._cache) == 0 and again.search("cat", k=1)[0].metadata == {"v": 2}
    again.close()


@pytest.mark.parametrize("row_cache", KINDS)
@pytest.mark.parametrize("header", [True, False])
def test_an_outside_commit_empties_the_cache(tmp_path, header, row_cache):
    """Seen through the WAL-index header of ``-shm`` (0.1 us a search), or without one through
    ``PRAGMA data_version`` alone."""
    m = EpisodicMemory(tmp_path, embedder=HASH, row_cache=row_cache)
    watch = m._cache._watch
    assert watch._shm is not None  # a WAL store: the header is mapped
    if not header:
        watch._shm.close()
        watch._shm = watch._seen = None
    a = m.add("the cat sat on the mat", metadata={"v": 1})
    for v in (2, 3):
        assert m.search("cat", k=1)[0].metadata == {"v": v - 1} and a in m._cache
        con = sqlite3.connect(tmp_path / "memory.sqlite")
        con.execute("UPDATE items SET metadata = ? WHERE id = ?", (f'{{"v": {v}}}', a))
        con.commit()
        con.close()
        assert m.search("cat", k=1)[0].metadata == {"v": v}
    m.close()


def test_ties_rank_by_id_and_min_score_cuts(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, index="hnsw")
    v = np.ones(32, dtype=np.float32)
    w = np.r_[np.ones(16), -np.ones(16)].astype(np.float32)
    ids = m.add_many(["one", "two", "three", "four"], vectors=np.stack([w, v, v, w]))
    for _ in range(2):  # from SQLite, then from the cache
        found = m.search(v, k=4)
        assert [it.id for it in found] == [ids[1], ids[2], ids[0], ids[3]]
        assert [it.score for it in found] == pytest.approx([1.0, 1.0, 0.0, 0.0], abs=1e-6)
        assert all(it.score == it.similarity for it in found)
        assert [it.id for it in m.search(v, k=4, min_score=0.5)] == [ids[1], ids[2]]
        assert [it.id for it in m.search(v, k=9)] == [it.id for it in found]  # k beyond the store
    m.close()


def test_nearest_orders_the_index_ties_by_id():
    from toolbox.memory.index.base import VectorIndex
    from toolbox.memory.ranking import nearest

    class Index:  # answers ties in whatever order, like hnswlib may
        search_one = VectorIndex.search_one

        def search(self, qv, k):
            return np.array([[9, 4, 7, -1]]), np.array([[0.5, 0.5, 0.25, -np.inf]], dtype=np.float32)

    for min_score, want in ((None, ([4, 9, 7], [0.5, 0.5, 0.25])), (0.3, ([4, 9], [0.5, 0.5]))):
        ids, sims = nearest(Index(), np.ones((1, 4), np.float32), 4, min_score)
        assert (ids.tolist(), sims) == want and ids.dtype == np.int64
