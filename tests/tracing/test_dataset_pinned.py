"""to_dataset's output pinned on a fixed fixture: every row of every split in order, the Arrow
features and the card (less its timing and source path), for each format, each store kind, with
and without near-duplicate removal. ``pinned_to_dataset.json`` beside this file was written by the
conversion before it was made faster (regenerate: ``python tests/tracing/test_dataset_pinned.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from datasets import load_from_disk

from toolbox.tracing import ActionRecord, MemoryStore, Score, chat_to_messages, open_store, text_message
from toolbox.tracing.dataset import to_dataset
from toolbox.tracing.record_filters import RecordFilter

PINNED = Path(__file__).with_name("pinned_to_dataset.json")
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
T0 = 1.8e9


def _records() -> list[ActionRecord]:
    """Agent runs with tool calls (some wrong, one crashed, one with a secret, duplicates and a near
    duplicate), an unmatched tool call, and GRPO-like groups of scored sibling generations."""
    out = []
    for i in range(14):
        a, b = i % 5, 7 + i % 3  # repeats: exact duplicates across runs
        q = f"Tom has {a} apples and buys {b} more. How many apples does he have now, in total?"
        if i == 3:
            q += " Mail the answer to ann@example.com."
        if i == 4:
            q += " Please."  # a near duplicate of another question
        chat = [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": q},
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
             "function": {"name": "calculator", "arguments": f'{{"expression": "{a}+{b}"}}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": str(a + b)},
            {"role": "assistant", "content": f"He has {a + b} apples. ✓"},
        ]  # fmt: skip
        tid, sid, t = f"{(i * 7919) % 97:032x}", f"s{i % 4}", T0 + i
        root = ActionRecord("agent", "solve", id=f"{i:04x}root", trace_id=tid, session_id=sid, start_time=t,
                            end_time=t + 1, scores=[Score("correct", i % 3 != 0, source="reward", timestamp=T0)],
                            tags=["run", "even" if i % 2 == 0 else "odd"])  # fmt: skip
        first = ActionRecord("llm_call", "chat", id=f"{i:04x}c1", parent_id=root.id, trace_id=tid, session_id=sid,
                             inputs=chat_to_messages(chat[:2]), outputs=chat_to_messages(chat[2:3]), tools=TOOLS,
                             model="tiny", start_time=t + 0.1, end_time=t + 0.2, tags=["run"])  # fmt: skip
        tool = ActionRecord("tool_call", "calculator", id=f"{i:04x}tc", parent_id=root.id, trace_id=tid,
                            session_id=sid, inputs={"expression": f"{a}+{b}"}, outputs=str(a + b),
                            start_time=t + 0.3, end_time=t + 0.4, error="ZeroDivisionError: x" if i == 5 else None)  # fmt: skip
        last = ActionRecord("llm_call", "chat", id=f"{i:04x}c2", parent_id=root.id, trace_id=tid, session_id=sid,
                            inputs=chat_to_messages(chat[:4] if i != 6 else chat[:2]), outputs=chat_to_messages(chat[4:]),
                            tools=TOOLS, model="tiny", start_time=t + 0.5, end_time=t + 0.6)  # fmt: skip
        out += [root, first, tool, last]
    for p in range(5):  # groups: one parent, four sibling generations with a reward
        tid = f"{1000 + p:032x}"
        parent = ActionRecord(
            "decision", "group", id=f"g{p}", trace_id=tid, session_id=f"g{p % 3}", start_time=T0
        )
        out.append(parent)
        for k in range(4):
            value = 1.0 if k == p % 4 else -k / 10 if p != 4 else 0.5  # group 4: all tied
            out.append(ActionRecord("llm_call", "generate", id=f"g{p}k{k}", parent_id=parent.id, trace_id=tid,
                                    session_id=parent.session_id, inputs=[text_message("user", f"{p}+{p}=")],
                                    outputs=[text_message("assistant", f"{2 * p + k}")], start_time=T0 + k,
                                    scores=[Score("reward", value, source="reward", timestamp=T0)]))  # fmt: skip
    return out


CASES = {
    "sft": dict(format="sft"),
    "sft_correct_near": dict(format="sft", filters=["correct==true"], near_dup=0.6),
    "sft_no_redact_no_dup": dict(format="sft", redact=None, exact_dup=False),
    "preference": dict(format="preference", score="reward"),
    "preference_text": dict(format="preference", score="reward", text=True, margin=0.5),
    "kto": dict(format="kto", score="reward", label_threshold=0.0),
    "kto_text": dict(format="kto", score="reward", text=True),
    "prompts": dict(format="prompts", text=True, near_dup=0.9),
    "prompts_tagged": dict(format="prompts", filters=None, tags=["run"]),
}


def _store(kind: str, tmp: Path, name: str):
    records = _records()
    if kind == "memory":
        store = MemoryStore()
        store.write(records)
        return store
    path = tmp / f"{name}.{kind}"
    with open_store(path) as store:
        store.write(records[::2])  # two writes: a trace's records not contiguous in the file
        store.write(records[1::2])
    return path


def outputs(kind: str, tmp: Path) -> dict:
    got = {}
    for name, case in CASES.items():
        case = dict(case)
        filters = RecordFilter(scores=case.pop("filters", None) or [], tags=case.pop("tags", ()))
        out = tmp / f"{kind}-{name}"
        card = to_dataset(_store(kind, tmp, name), out, filters=filters, test_fraction=0.3, seed=3, **case)
        ds = load_from_disk(str(out))
        card.pop("seconds"), card.pop("source")
        assert card.pop("skipped") == {"records": {}, "scores": {}}, name  # every record is one
        got[name] = {
            "card": card,
            "features": {split: str(ds[split].features) for split in ds},
            "rows": {split: list(ds[split]) for split in ds},
        }
    return json.loads(json.dumps(got))


def _digest(rows: dict) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
def test_to_dataset_output_is_pinned(kind, tmp_path):
    pinned = json.loads(PINNED.read_text())
    got = outputs(kind, tmp_path)
    assert got.keys() == pinned["memory"].keys()
    for name, want in pinned["memory"].items():
        assert got[name]["card"] == want["card"], name
        assert got[name]["features"] == want["features"], name
        if kind == "memory":
            assert got[name]["rows"] == want["rows"], name
        # the other stores read traces in another order (JSONL: file order, SQLite: by trace id)
        assert _digest(got[name]["rows"]) == pinned["rows_sha256"][kind][name], name


if __name__ == "__main__":  # regenerate the pinned outputs
    import tempfile

    result: dict = {"rows_sha256": {}}
    for kind in ("memory", "jsonl", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            got = outputs(kind, Path(tmp))
        result["rows_sha256"][kind] = {name: _digest(v["rows"]) for name, v in got.items()}
        if kind == "memory":
            result["memory"] = got
    PINNED.write_text(json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {PINNED}")
