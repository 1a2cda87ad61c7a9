"""The row layer under the store: items read from SQLite decode their metadata on first use and
behave like constructed ones; the hnsw index maps labels to ids through one array."""

from __future__ import annotations

import numpy as np

from toolbox.memory import EpisodicMemory, MemoryItem
from toolbox.memory.index.hnsw import HnswIndex


def test_items_from_sqlite_equal_constructed_items(tmp_path):
    with EpisodicMemory(tmp_path / "s", embedder={"name": "hashing", "dim": 32}) as m:
        i = m.add("the cat sat on the mat", metadata={"tags": ["a", "b"], "n": 1}, timestamp=5.0)
        got = m.get(i)
        assert "_metadata" not in got.__dict__  # not decoded yet
        expected = MemoryItem(
            id=i,
            text="the cat sat on the mat",
            metadata={"tags": ["a", "b"], "n": 1},
            timestamp=5.0,
            created_at=got.created_at,
            updated_at=got.updated_at,
        )
        assert got == expected and got.to_dict() == expected.to_dict()
        assert got.metadata == {"tags": ["a", "b"], "n": 1}
        got.metadata = {"n": 2}
        assert got.metadata == {"n": 2} and got.to_dict()["metadata"] == {"n": 2}
        [hit] = m.search("cat on a mat", k=1)
        assert hit.id == i and hit.metadata["tags"] == ["a", "b"] and hit.score == hit.similarity


def test_hnsw_label_array_follows_deletes_updates_and_reload(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = HnswIndex(16, ef_search=200)
    index.add(np.arange(10, 3010), x)  # grows the label array past its first 1024 slots
    index.remove(np.arange(10, 1010))
    index.add(np.arange(1010, 1510), x[:500])  # updates: fresh labels, the old ones dead
    ids, _ = index.search(x[:500], 1)
    assert (ids[:, 0] == np.arange(1010, 1510)).mean() > 0.95
    assert set(index.search(x, 50)[0].ravel().tolist()) <= set(range(1010, 3010))
    index.save(tmp_path)
    again = HnswIndex.load(tmp_path, 16, ef_search=200)
    assert np.array_equal(again.search(x[:500], 5)[0], index.search(x[:500], 5)[0])
