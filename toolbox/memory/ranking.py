"""Search: the vector candidates a filter allows, and their blend with recency and a text match.

Ranking is by cosine similarity, optionally blended (additively) with recency,
``recency_weight · 0.5 ** (age / recency_half_life)``, and with a text match,
``text_weight · bm25 / max bm25`` from SQLite FTS5, over the union of the vector and text
candidates, as Letta's hybrid archival search does. Filters are ``toolbox.memory.metadata_filters``.

A filter matching at most the index's ``exact_below`` items is searched exactly over them. A
broader one (an approximate index) searches the whole graph for more candidates than needed and
keeps those SQLite says match: first the nearest ``max(8k, 64)``, then as many as the share of
matches among them says should hold about ``3k`` matches, until ``3k`` (or, past 4,096 candidates,
``k``) survive; a filter sparser than that among the nearest hands the allowed ids to the index.
It never materialises the ids of a broad filter, and counts its matches only up to
``exact_below + 1`` (counting all 100k matches of a 10% filter at 1M took 0.2 s of row reads
before the metadata index held the JSON type, and 24 ms after: more than the search).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from toolbox.core.errors import ConfigError
from toolbox.memory.embedders.base import Embedder
from toolbox.memory.index.base import VectorIndex
from toolbox.memory.metadata_filters import compile_filter
from toolbox.memory.storage.row_store import MemoryItem, RowStore


def query_row(embedder: Embedder, query: str | np.ndarray) -> np.ndarray:
    """A ``(1, dim)`` float32 query row: the text embedded (a unit vector), or the given vector as
    it is (``VectorIndex.search_one`` normalises it)."""
    if isinstance(query, str):
        return embedder.embed([query])
    q = np.asarray(query, dtype=np.float32).reshape(1, -1)
    if q.shape[1] != embedder.dim:
        raise ConfigError(f"search: the query vector has {q.shape[1]} dimensions, the store {embedder.dim}.")
    return q


def query_vector(embedder: Embedder, query: str | np.ndarray) -> np.ndarray:
    """A ``(1, dim)`` unit query vector: the text embedded, or the given vector normalised."""
    return unit_row(query_row(embedder, query))


def unit_row(q: np.ndarray) -> np.ndarray:
    """A ``(1, dim)`` row divided by its norm (a zero row stays zero)."""
    norm = math.sqrt(q[0].dot(q[0]))  # one row: ndarray.dot, cheaper than `@` and than normalize_rows
    return q * (1.0 / norm) if norm > 0 else q.copy()


def text_candidates(
    cand: dict[int, float],
    rows: RowStore,
    index: VectorIndex,
    query: str,
    qv: np.ndarray,
    n: int,
    where: tuple[str, list[Any]] | None,
) -> dict[int, float]:
    """The FTS5 text scores of the ``n`` best text matches; adds those not yet in ``cand`` to it."""
    text_scores = rows.text_match(query, n, where)
    extra = [i for i in text_scores if i not in cand]
    if extra:
        extra_sims = index.get(np.array(extra, dtype=np.int64)) @ qv[0]
        cand.update(zip(extra, extra_sims.tolist(), strict=True))
    return text_scores


def nearest(
    index: VectorIndex, query: np.ndarray, k: int, min_score: float | None
) -> tuple[np.ndarray, list[float]]:
    """The ``k`` nearest ids (an int64 array) and their cosine similarities (a list) to a
    ``query_row``, best first (ties: the smaller id first), those below ``min_score`` dropped: the
    whole ranking of a search by similarity alone. The ids stay an array: the resident rows gather
    with it."""
    ids, sims = index.search_one(query, k)
    if min_score is not None:
        keep = [j for j, s in enumerate(sims) if s >= min_score]
        ids, sims = ids[keep], [sims[j] for j in keep]
    if len(set(sims)) < len(sims):  # a tie: the index orders it as it likes, we by id
        order = np.lexsort((ids, -np.array(sims)))
        ids, sims = ids[order], [sims[j] for j in order.tolist()]
    return ids, sims


def _hits(ids: np.ndarray, sims: np.ndarray) -> dict[int, float]:
    """``{id: similarity}`` of one query's row of results (padding ``-1`` dropped)."""
    return {i: s for i, s in zip(ids.tolist(), sims.tolist(), strict=True) if i >= 0}


def vector_candidates(
    index: VectorIndex,
    rows: RowStore,
    fields: set[str],
    count: int,
    qv: np.ndarray,
    n: int,
    filters: Mapping[str, Any] | None,
) -> dict[int, float] | None:
    """The ``n`` best ``{id: similarity}`` among the items ``filters`` allows (None: none allowed)."""
    if not filters:
        ids, sims = index.search(qv, n)
        return _hits(ids[0], sims[0])
    sql, params = compile_filter(filters, fields)
    limit = getattr(index, "exact_below", None)
    # counting stops past the limit: a broad filter's count would cost more than its search
    matching = rows.count(sql, params, None if limit is None else limit + 1)
    if matching == 0:
        return None
    if limit is not None and matching > limit:
        want = min(count, max(8 * n, 64))
        while True:
            ids, sims = index.search(qv, want)
            found = _hits(ids[0], sims[0])
            keep = rows.matching(list(found), sql, params)
            # the filter's share among the nearest sets the next request: about 3n survivors
            grow = 4 * want if not keep else max(2 * want, -(-3 * n * want // len(keep)))
            if len(keep) >= 3 * n or want >= count or (len(keep) >= n and grow > 4096):
                best = sorted(keep, key=lambda i: -found[i])[:n]
                return {i: found[i] for i in best}
            want = min(count, grow)
            if want > 4096:  # too sparse among the nearest: let the index walk with the filter
                break
    allowed = np.array(rows.where(sql, params), dtype=np.int64)
    ids, sims = index.search(qv, n, allowed)
    return _hits(ids[0], sims[0])


def rank(
    items: list[MemoryItem],
    similarity: Mapping[int, float],
    k: int,
    now: float,
    recency_half_life: float | None,
    recency_weight: float,
    text_scores: Mapping[int, float],
    text_weight: float,
) -> list[MemoryItem]:
    """Score the candidate items, and return the ``k`` best (ties: the smaller id first)."""
    for item in items:
        item.similarity = score = similarity[item.id]
        if recency_half_life is not None:
            age = max(0.0, now - item.timestamp)
            score += recency_weight * 0.5 ** (age / recency_half_life)
        if text_scores:
            score += text_weight * text_scores.get(item.id, 0.0)
        item.score = score
    items.sort(key=lambda it: (-it.score, it.id))
    return items[:k]
