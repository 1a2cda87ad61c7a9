"""Record JSON through orjson and through the json module: the same values stored, the same refused."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid

import pytest

import toolbox.core.json_codec as codec
from toolbox.tracing import ActionRecord, Score, Tracer
from toolbox.tracing.record import SerializationError, encode
from toolbox.tracing.stores.base import MemoryStore


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


VALUES = [
    {"a": [1, 2.5, None, True, "x"], "b": {"c": (1, 2)}, "u": 'é ✓ \n "q"'},
    1e-7,
    1e16,
    2**70,
    -(2**63),
    float("nan"),
    float("inf"),
    {1: "int key", None: "none key"},
    {("t",): 1},
    uuid.UUID(int=5),
    Color.RED,
    Level.HIGH,
    Name("sub"),
    Point(1),
    datetime.datetime(2026, 1, 1),
    "lone \ud800 surrogate",
    [float("-inf")],
]


def _outcome(value, monkeypatch, with_orjson: bool):
    monkeypatch.setattr(codec, "orjson", codec.orjson if with_orjson else None)
    r = ActionRecord("custom", "v", id="0" * 16, trace_id="0" * 32, inputs=value, start_time=1.0)
    try:
        texts: list[str] = []
        line = encode(r, texts)
    except SerializationError as e:
        return "refused", str(e)
    return json.loads(line), sorted(texts)


@pytest.mark.skipif(codec.orjson is None, reason="orjson not installed: only the json path exists")
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_orjson_and_json_store_and_refuse_the_same(value, monkeypatch):
    fast = _outcome(value, monkeypatch, True)
    slow = _outcome(value, monkeypatch, False)
    assert fast == slow


def test_texts_are_the_redactable_strings_and_a_refused_value_is_stored_as_repr(monkeypatch):
    r = ActionRecord("llm_call", "chat", id="1" * 16, trace_id="1" * 32, session_id="s", model="m",
                     inputs=[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}], error="boom",
                     metadata={"k": "v"}, tags=["t"])  # fmt: skip
    texts: list[str] = []
    encode(r, texts)
    assert sorted(texts) == ["boom", "chat", "hi", "text", "user", "v"]
    store = MemoryStore()
    with Tracer(store) as tracer, tracer.span("custom", "x", inputs={"when": float("nan")}):
        pass
    assert tracer.unserialisable == 1 and store.records[0].inputs == {"when": "nan"}
    assert codec.loads(b'{"a": NaN}')["a"] != codec.loads(b'{"a": NaN}')["a"]  # json's reading, as before
    with pytest.raises(ValueError):
        codec.loads('{"cut": "li')


def test_a_record_reads_back_field_for_field():
    r = ActionRecord("llm_call", "chat", id="2" * 16, parent_id="3" * 16, trace_id="2" * 32, session_id="s",
                     inputs=[{"role": "user", "parts": [{"type": "text", "content": "q"}]}], outputs="a",
                     tools=[{"type": "function"}], model="m", operation="text_completion", input_tokens=3,
                     output_tokens=4, finish_reason="stop", error="E: x", start_time=1.5, end_time=2.5,
                     scores=[Score("r", 0.5, "reward", comment="c", timestamp=9.0)], tags=["a", "b"],
                     metadata={"k": [1, 2]})  # fmt: skip
    assert ActionRecord.from_dict(codec.loads(encode(r))) == r
