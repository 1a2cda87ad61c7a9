"""Filters select exactly the items a brute-force Python filter selects (hypothesis)."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolbox.memory.metadata_filters import FilterError
from toolbox.memory.store import EpisodicMemory

KEYS = ["a", "b", "c"]
EXAMPLES = int(os.environ.get("MEMORY_FILTER_EXAMPLES", "400"))  # more for a deeper run
MISSING = object()


# the reference: plain Python over the items, written from the semantics in metadata_filters.py -------------
def kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "text"
    if v is None:
        return "null"
    return type(v).__name__


def field_value(name, item):
    if name in ("id", "text", "importance", "timestamp"):
        return item[name]
    return item["metadata"].get(name, MISSING)


def ref_op(name, op, v, item):
    x = field_value(name, item)
    if op == "ne":
        return not ref_op(name, "eq", v, item)
    if op == "nin":
        return not ref_op(name, "in", v, item)
    if op == "in":
        return any(ref_op(name, "eq", e, item) for e in v)
    if op == "exists":
        return (x is not MISSING) == v
    if op == "contains":
        if isinstance(x, str) and isinstance(v, str):
            return v in x
        if isinstance(x, list):
            return any(kind(e) == kind(v) and e == v for e in x)
        return False
    if x is MISSING or kind(x) != kind(v):
        return False
    if op == "eq":
        return x == v
    return {"gt": x > v, "gte": x >= v, "lt": x < v, "lte": x <= v}[op]


def ref_match(spec, item):
    out = True
    for key, value in spec.items():
        if key == "AND":
            out &= all(ref_match(v, item) for v in value)
        elif key == "OR":
            out &= any(ref_match(v, item) for v in value)
        elif key == "NOT":
            out &= not ref_match(value, item)
        elif isinstance(value, dict):
            out &= all(ref_op(key, op, v, item) for op, v in value.items())
        else:
            out &= ref_op(key, "eq", value, item)
    return out


# strategies --------------------------------------------------------------------------------------
numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 2.0, -1.5, 2.5]))
texts = st.text(alphabet="abé", max_size=3)
scalars = st.one_of(numbers, texts, st.booleans(), st.none())
values = st.one_of(scalars, st.lists(st.one_of(numbers, texts, st.booleans()), max_size=3), st.just({"x": 1}))
metadata = st.dictionaries(st.sampled_from(KEYS), values, max_size=3)


@st.composite
def leaf(draw):
    name = draw(st.sampled_from([*KEYS, "importance", "text", "id"]))
    if name in ("importance", "id"):
        op = draw(st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]))
        v = draw(st.lists(numbers, max_size=3)) if op in ("in", "nin") else draw(numbers)
    elif name == "text":
        op = draw(st.sampled_from(["eq", "ne", "gt", "lt", "contains", "in"]))
        v = draw(st.lists(texts, max_size=3)) if op == "in" else draw(texts)
    else:
        op = draw(st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists"]))
        if op == "exists":
            v = draw(st.booleans())
        elif op in ("in", "nin"):
            v = draw(st.lists(scalars, max_size=3))
        elif op == "contains":
            v = draw(st.one_of(numbers, texts, st.booleans()))
        elif op in ("eq", "ne"):
            v = draw(scalars)
        else:
            v = draw(st.one_of(numbers, texts))
    if op == "eq" and draw(st.booleans()):
        return {name: v}  # the shorthand
    return {name: {op: v}}


filters = st.recursive(
    leaf(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda xs: {"AND": xs}),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: {"OR": xs}),
        children.map(lambda x: {"NOT": x}),
        st.tuples(children, children).map(lambda t: {**t[0], "OR": [t[1]]}),
    ),
    max_leaves=6,
)
stores = st.lists(st.tuples(texts.filter(str.strip), metadata, numbers), min_size=1, max_size=12)


def make_store(path, rows, index="exact"):
    memory = EpisodicMemory(path, embedder={"name": "hashing", "dim": 16}, index=index, cache=False)
    # one item carries every key, so every key is a known field
    memory.add_many(
        ["all keys", *[r[0] for r in rows]],
        [dict.fromkeys(KEYS, 0), *[r[1] for r in rows]],
        importances=[0.0, *[float(r[2]) for r in rows]],
    )
    items = [
        {
            "id": it.id,
            "text": it.text,
            "importance": it.importance,
            "timestamp": it.timestamp,
            "metadata": it.metadata,
        }
        for it in memory.items()
    ]
    return memory, items


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """80 items drawn once (seeded) from the same value pools the filters draw from."""
    rng = random.Random(0)

    def number():
        return rng.choice([rng.randint(-3, 3), rng.choice([0.5, 2.0, -1.5, 2.5])])

    def text():
        return "".join(rng.choice("abé") for _ in range(rng.randint(0, 3)))

    def scalar():
        return rng.choice([number, text, lambda: rng.random() < 0.5, lambda: None])()

    def value():
        kind = rng.random()
        if kind < 0.7:
            return scalar()
        if kind < 0.95:
            return [
                rng.choice([number, text, lambda: rng.random() < 0.5])() for _ in range(rng.randint(0, 3))
            ]
        return {"x": 1}

    rows = [
        (text() + "x", {k: value() for k in rng.sample(KEYS, rng.randint(0, 3))}, number()) for _ in range(80)
    ]
    memory, items = make_store(tmp_path_factory.mktemp("big"), rows)
    yield memory, items
    memory.close()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters)
def test_where_equals_brute_force(big_store, spec):
    memory, items = big_store
    assert memory.where(spec) == [it["id"] for it in items if ref_match(spec, it)], spec


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=stores, spec=filters, index=st.sampled_from(["exact", "hnsw"]))
def test_filtered_search_returns_exactly_the_matching_items(tmp_path_factory, rows, spec, index):
    memory, items = make_store(tmp_path_factory.mktemp("m"), rows, index)
    try:
        expected = {it["id"] for it in items if ref_match(spec, it)}
        found = {it.id for it in memory.search("a b", k=len(items), filters=spec)}
        assert found == expected, spec
    finally:
        memory.close()


def test_time_ranges_take_iso_dates(tmp_path):
    memory = EpisodicMemory(tmp_path, embedder={"name": "hashing", "dim": 16})
    ids = memory.add_many(
        ["jan", "feb", "mar"], timestamps=["2026-01-15", "2026-02-15T12:00:00Z", 1_773_532_800.0]
    )  # the last is 2026-03-15 00:00 UTC
    assert memory.where({"timestamp": {"gte": "2026-02-01", "lt": "2026-03-01"}}) == [ids[1]]
    assert memory.where({"timestamp": {"gte": "2026-03-15T00:00:00+00:00"}}) == [ids[2]]
    assert memory.where({"timestamp": {"lt": 1_768_435_200.0 + 1}}) == [ids[0]]  # 2026-01-15 00:00 UTC
    with pytest.raises(FilterError, match="not a time"):
        memory.where({"timestamp": {"gte": "last tuesday"}})
    memory.close()


def test_bad_filters_name_the_problem(tmp_path):
    memory = EpisodicMemory(tmp_path, embedder={"name": "hashing", "dim": 16})
    memory.add("x", metadata={"source": "eval", "step": 3})
    with pytest.raises(FilterError, match=r"unknown field 'sorce'.*source"):
        memory.where({"sorce": "eval"})
    with pytest.raises(FilterError, match=r"unknown operator 'greater'.*gte"):
        memory.where({"step": {"greater": 1}})
    with pytest.raises(FilterError, match="'in' takes a list"):
        memory.where({"step": {"in": 3}})
    with pytest.raises(FilterError, match="boolean can only be compared with eq"):
        memory.where({"step": {"gt": True}})
    assert memory.where({"step": {"gt": "2"}}) == []  # a number never compares with a string
    memory.close()
