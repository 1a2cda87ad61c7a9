"""Vector indexes: exact search against numpy, hnsw against exact (recall), deletes, updates,
filtered search, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from toolbox.core.registries import VECTOR_INDEXES
from toolbox.memory.embedders.base import normalize_rows
from toolbox.memory.index.exact import ExactIndex
from toolbox.memory.index.hnsw import HnswIndex, saved_vectors

DIM = 24


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, DIM))
    return normalize_rows(centers[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, DIM)))


def brute(vectors, ids, q, k):
    s = q @ vectors.T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(s, order, axis=1)


def test_exact_matches_numpy_with_removes_and_updates():
    x = data(300)
    ids = np.arange(1000, 1300)
    index = VECTOR_INDEXES.build({"name": "exact"}, dim=DIM)
    index.add(ids, x)
    index.remove(ids[:50])
    index.add(ids[60:70], x[:10])  # replace ten vectors
    live_ids = ids[50:]
    live = x[50:].copy()
    live[10:20] = x[:10]
    q = data(7, seed=1)
    got_ids, got_s = index.search(q, 5)
    ref_ids, ref_s = brute(live, live_ids, q, 5)
    np.testing.assert_allclose(got_s, ref_s, rtol=1e-5)
    assert (got_ids == ref_ids).all() and len(index) == 250
    allowed = live_ids[::7]
    got_ids, _ = index.search(q, 3, allowed=allowed)
    ref_ids, _ = brute(index.get(allowed), allowed, q, 3)
    assert (got_ids == ref_ids).all()
    pad_ids, pad_s = index.search(q[:1], 5, allowed=allowed[:2])  # fewer allowed than k: padded
    assert pad_ids[0, 2:].tolist() == [-1, -1, -1] and np.isneginf(pad_s[0, 2:]).all()


def test_hnsw_recall_deletes_updates_and_reload(tmp_path):
    x = data(2000)
    ids = np.arange(1, 2001)
    hnsw = HnswIndex(DIM, ef_search=64)
    exact = ExactIndex(DIM)
    for index in (hnsw, exact):
        index.add(ids, x)
        index.remove(ids[:200])
        index.add(ids[300:400], data(100, seed=5))  # updated vectors
    q = data(100, seed=9)
    found, _ = hnsw.search(q, 10)
    truth, _ = exact.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), truth.tolist(), strict=True)])
    assert recall >= 0.95
    assert not set(found.ravel().tolist()) & set(ids[:200].tolist())  # deleted never come back
    np.testing.assert_allclose(hnsw.get(ids[300:305]), data(100, seed=5)[:5], rtol=1e-6)
    hnsw.add(ids[:3], x[:3])  # re-adding deleted ids
    assert len(hnsw) == 1803 and hnsw.search(x[:1], 1)[0][0, 0] == 1
    hnsw.save(tmp_path)
    again = HnswIndex.load(tmp_path, DIM, ef_search=64)
    assert len(again) == 1803 and sorted(again.ids().tolist()) == sorted(hnsw.ids().tolist())
    assert (again.search(q, 10)[0] == hnsw.search(q, 10)[0]).all()
    # the reopened copy of the vectors comes from hnsw.bin (hnswlib's own, renormalised): the same
    # vectors under the same ids, deleted slots reused by replace_deleted included
    assert not (tmp_path / "exact.npz").exists()
    live = hnsw.ids()
    np.testing.assert_allclose(again.get(live), hnsw.get(live), atol=1e-6)
    assert (again.exact_search(q, 10, live)[0] == hnsw.exact_search(q, 10, live)[0]).all()


def test_vectors_from_an_hnsw_file_need_its_layout(tmp_path):
    hnsw = HnswIndex(DIM)
    hnsw.add(np.arange(10), data(10))
    hnsw.save(tmp_path)
    labels = np.load(tmp_path / "labels.npy")[1:, 1]
    np.testing.assert_allclose(saved_vectors(tmp_path / "hnsw.bin", DIM, labels), data(10), atol=1e-6)
    with pytest.raises(ValueError, match="not an hnswlib index of dimension 32"):
        saved_vectors(tmp_path / "hnsw.bin", 32, labels)
    with pytest.raises(ValueError, match="labels of labels.npy are not in the saved index"):
        saved_vectors(tmp_path / "hnsw.bin", DIM, np.array([3, 99]))


@pytest.mark.parametrize("exact_below", [20000, 10])  # exact gather, and hnswlib's filter predicate
def test_hnsw_filtered_search(exact_below):
    x = data(1500)
    ids = np.arange(1, 1501)
    hnsw = HnswIndex(DIM, ef_search=200, exact_below=exact_below)
    hnsw.add(ids, x)
    allowed = ids[ids % 3 == 0]
    q = data(30, seed=4)
    found, scores = hnsw.search(q, 5, allowed=allowed)
    assert set(found.ravel().tolist()) <= set(allowed.tolist())
    truth, truth_s = brute(hnsw.get(allowed), allowed, q, 5)
    if exact_below > len(allowed):
        assert (found == truth).all()
    else:  # approximate: nearly all found
        hits = np.mean(
            [len(set(a) & set(b)) / 5 for a, b in zip(found.tolist(), truth.tolist(), strict=True)]
        )
        assert hits >= 0.9
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    ids_small, _ = hnsw.search(q[:1], 5, allowed=allowed[:3])
    assert sorted(ids_small[0, :3].tolist()) == sorted(allowed[:3].tolist()) and ids_small[0, 3] == -1


def test_dimension_is_checked():
    index = ExactIndex(DIM)
    with pytest.raises(ValueError, match="expected vectors of dimension 24"):
        index.add(np.array([1]), np.zeros((1, 8)))


@pytest.mark.parametrize("name", ["exact", "hnsw"])
def test_search_one_normalises_the_query_and_drops_the_padding(name):
    """``search_one`` (the store's search by similarity alone) takes a query of any norm: the same
    ids and cosine similarities as ``search`` with the unit query; fewer items than k: no padding."""
    x = data(200)
    ids = np.arange(1, 201)
    index = VECTOR_INDEXES.build({"name": name, **({"ef_search": 200} if name == "hnsw" else {})}, dim=DIM)
    index.add(ids, x)
    q = data(5, seed=3)
    for row in q:
        want_ids, want_s = index.search(row[None], 10)
        for scale in (1.0, 7.5, 0.01):
            got_ids, got_s = index.search_one((scale * row)[None].astype(np.float32), 10)
            assert got_ids.dtype == np.int64 and got_ids.tolist() == want_ids[0].tolist()
            assert got_s == pytest.approx(want_s[0].tolist(), abs=1e-5)
    zero_ids, zero_s = index.search_one(np.zeros((1, DIM), np.float32), 3)
    assert len(zero_ids) == 3 and zero_s == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    small = VECTOR_INDEXES.build({"name": name}, dim=DIM)
    small.add(ids[:4], x[:4])
    got_ids, got_s = small.search_one(3 * x[:1], 10)
    assert sorted(got_ids.tolist()) == [1, 2, 3, 4] and got_ids[0] == 1 and got_s[0] == pytest.approx(1.0)
    assert VECTOR_INDEXES.build({"name": name}, dim=DIM).search_one(x[:1], 5)[0].tolist() == []
