"""Trace -> dataset: lossless tool-calling SFT rows, preference/KTO/prompt rows, filters, dedupe, split."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import load_from_disk

from toolbox.tracing import ActionRecord, MemoryStore, Score, TraceError, Tracer, open_store, text_message
from toolbox.tracing.dataset import to_dataset
from toolbox.tracing.record_filters import RecordFilter

torch.set_num_threads(1)


def _strip(message: dict) -> dict:
    return {k: v for k, v in message.items() if v is not None}


def test_tool_calling_traces_convert_losslessly(tmp_path, store_path, record_runs, tools):
    with Tracer(store_path) as tracer:
        chats = record_runs(tracer, n=12)
    out = tmp_path / "sft"
    card = to_dataset(store_path, out, format="sft", test_fraction=0.3)
    ds = load_from_disk(str(out))
    rows = [*ds["train"], *ds.get("test", [])]
    assert card["records_in"] == 48 and card["traces_in"] == 12
    assert card["removed"] == {"continued_in_later_call": 12}  # the first call of a run is part of its second
    assert len(rows) == 12 == sum(card["rows_out"].values())
    got = sorted(([_strip(m) for m in r["messages"]] for r in rows), key=lambda c: c[1]["content"])
    assert got == sorted(chats, key=lambda c: c[1]["content"])  # every message, every id, as recorded
    for r in rows:
        assert json.loads(r["tools"]) == tools
        calls = [c["id"] for m in r["messages"] for c in (m["tool_calls"] or [])]
        replies = [m["tool_call_id"] for m in r["messages"] if m["role"] == "tool"]
        assert calls == replies and len(calls) == 1
    card_file = json.loads((out / "card.json").read_text())
    assert (
        card_file["rows_out"] == card["rows_out"]
        and "| continued_in_later_call | 12 |" in (out / "README.md").read_text()
    )


def test_split_by_session_puts_no_session_in_both(tmp_path, record_runs):
    store = MemoryStore()
    tracer = Tracer(store)
    record_runs(tracer, n=40, sessions=10)
    tracer.flush()
    card = to_dataset(store, tmp_path / "d", format="sft", test_fraction=0.3, seed=1)
    ds = load_from_disk(str(tmp_path / "d"))
    sessions = {}
    by_question = {
        r.inputs[1]["parts"][0]["content"]: r.session_id for r in store.records if r.kind == "llm_call"
    }
    for split in ds:
        sessions[split] = {by_question[row["messages"][1]["content"]] for row in ds[split]}
    assert sessions["train"] and sessions["test"] and not sessions["train"] & sessions["test"]
    assert sum(card["rows_out"].values()) == 40


def test_filters_count_each_rule_and_an_empty_result_names_the_filter(tmp_path, record_runs):
    path = tmp_path / "t.sqlite"
    with Tracer(path) as tracer:
        record_runs(tracer, n=12)
        with tracer.span("agent", "broken") as run:
            with tracer.span("llm_call", "chat", inputs=[text_message("user", "1+1?")]) as c:
                c.outputs = [text_message("assistant", "2")]
            with pytest.raises(RuntimeError), tracer.span("tool_call", "calculator"):
                raise RuntimeError("tool crashed")
        tracer.score(run.id, "correct", True)
    card = to_dataset(path, tmp_path / "ok", filters=RecordFilter(scores=["correct==true"]))
    # 4 of 12 runs are wrong (i % 3 == 0): their 8 model calls; the crashed run's call by "errors"
    assert card["removed"] == {"score:correct==True": 8, "errors": 1, "continued_in_later_call": 8}
    assert sum(card["rows_out"].values()) == 8
    with pytest.raises(
        TraceError,
        match=r"every row was filtered out \(no dataset written\); the filter 'score:correct>=2.0' removed 24",
    ):
        to_dataset(path, tmp_path / "none", filters=RecordFilter(scores=["correct>=2"]))
    assert not (tmp_path / "none").exists()
    with pytest.raises(TraceError, match="NAME>=X"):
        RecordFilter(scores=["correct=>1"])


def test_step_rows_keep_a_right_call_before_a_wrong_answer_only_with_final_calls(
    tmp_path, tools, tool_conversation
):
    """Each model call filtered by its own reward (``step_ok`` on a turn span, the parent of the
    call): a run whose call is right and answer wrong gives its call's row, ending in the call,
    with ``final_calls``; without it that row is dropped as before. A call missing its reply in
    the middle of a row is never kept."""
    from toolbox.tracing import chat_to_messages

    conversation = tool_conversation
    store = MemoryStore()
    tracer = Tracer(store)
    for i in range(6):
        chat = conversation(i)
        with tracer.span("agent", "solve", session_id=f"s{i}"):
            for turn, (upto, end) in enumerate(((2, 3), (4, 5))):
                with tracer.span("decision", "turn") as t:
                    with tracer.span(
                        "llm_call", "chat", inputs=chat_to_messages(chat[:upto]), tools=tools
                    ) as c:
                        c.outputs = chat_to_messages(chat[upto:end])
                tracer.score(t.id, "step_ok", turn == 0 or i % 2 == 0)  # odd runs: the answer is wrong
    with tracer.span("agent", "solve", session_id="s-broken"):  # a call with no reply inside the row
        chat = conversation(9)
        with tracer.span("decision", "turn") as t:
            with tracer.span("llm_call", "chat", inputs=chat_to_messages(chat[:3]), tools=tools) as c:
                c.outputs = chat_to_messages(chat[4:5])
        tracer.score(t.id, "step_ok", True)
    tracer.flush()
    rule = RecordFilter(scores=["step_ok==true"])
    card = to_dataset(store, tmp_path / "whole", filters=rule, test_fraction=0.0)
    assert card["removed"] == {
        "score:step_ok==True": 3,
        "continued_in_later_call": 3,
        "unmatched_tool_call": 4,
    }
    assert all(len(r["messages"]) == 5 for r in load_from_disk(str(tmp_path / "whole"))["train"])
    card = to_dataset(store, tmp_path / "steps", filters=rule, final_calls=True, test_fraction=0.0)
    assert card["removed"] == {
        "score:step_ok==True": 3,
        "continued_in_later_call": 3,
        "unmatched_tool_call": 1,
    }
    assert card["settings"]["final_calls"] is True
    rows = sorted(load_from_disk(str(tmp_path / "steps"))["train"], key=lambda r: r["messages"][1]["content"])
    got = [[_strip(m) for m in r["messages"]] for r in rows]
    want = sorted(
        (conversation(i)[: 5 if i % 2 == 0 else 3] for i in range(6)), key=lambda c: c[1]["content"]
    )
    assert got == want  # odd runs: question and the right call, as recorded; even runs: whole
    # complete_calls: the odd runs' call rows get the reply their trace recorded (the filtered-out
    # second call's inputs hold it) and the template's answer; this fixture's answers have the
    # template's form, so every row is then the whole conversation
    card = to_dataset(
        store, tmp_path / "done", filters=rule, complete_calls="He has RESULT.", test_fraction=0.0
    )
    assert card["removed"] == {
        "score:step_ok==True": 3,
        "continued_in_later_call": 3,
        "unmatched_tool_call": 1,
    }
    assert card["settings"]["complete_calls"] == "He has RESULT."
    rows = sorted(load_from_disk(str(tmp_path / "done"))["train"], key=lambda r: r["messages"][1]["content"])
    got = [[_strip(m) for m in r["messages"]] for r in rows]
    assert got == sorted((conversation(i)[:5] for i in range(6)), key=lambda c: c[1]["content"])
    with pytest.raises(TraceError, match="RESULT"):
        to_dataset(store, tmp_path / "bad", filters=rule, complete_calls="The answer is {result}.")


def _group_store(n_prompts=4, n=4) -> MemoryStore:
    """GRPO-like: per prompt a parent and n sibling generations with a reward."""
    store = MemoryStore()
    rows = []
    for p in range(n_prompts):
        parent = ActionRecord("decision", "group", id=f"g{p}", trace_id=f"t{p}", session_id=f"s{p}")
        rows.append(parent)
        for k in range(n):
            rows.append(
                ActionRecord(
                    "llm_call",
                    "generate",
                    id=f"g{p}c{k}",
                    parent_id=parent.id,
                    trace_id=f"t{p}",
                    session_id=f"s{p}",
                    start_time=float(k),
                    inputs=f"{p}+{p}=",
                    outputs=f"{2 * p + k}",
                    scores=[Score("reward", 1.0 if k == 0 else -k / 10)],
                )  # fmt: skip
            )
    store.write(rows)
    return store


def test_preference_pairs_from_ranked_siblings_and_kto_and_prompt_rows(tmp_path):
    store = _group_store()
    card = to_dataset(
        store, tmp_path / "pref", format="preference", score="reward", text=True, test_fraction=0.0
    )
    rows = list(load_from_disk(str(tmp_path / "pref"))["train"])
    assert card["rows_out"] == {"train": 4}
    for r in sorted(rows, key=lambda r: r["prompt"]):
        p = int(r["prompt"][0])
        assert (r["prompt"], r["chosen"], r["rejected"]) == (f"{p}+{p}=", f"{2 * p}", f"{2 * p + 3}")
        assert (r["score_chosen"], r["score_rejected"]) == (1.0, -0.3)
    conv = to_dataset(store, tmp_path / "conv", format="preference", score="reward", test_fraction=0.0)
    row = load_from_disk(str(tmp_path / "conv"))["train"][0]
    assert row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant" and conv["rows_out"]
    with pytest.raises(TraceError, match="tied_siblings"):
        to_dataset(store, tmp_path / "tied", format="preference", score="reward", margin=5.0)

    card = to_dataset(
        store,
        tmp_path / "kto",
        format="kto",
        score="reward",
        label_threshold=0.0,
        text=True,
        test_fraction=0.0,
    )
    kto = list(load_from_disk(str(tmp_path / "kto"))["train"])
    assert sum(r["label"] for r in kto) == 4 and len(kto) == 16
    assert {(r["prompt"], r["completion"]) for r in kto if r["label"]} == {
        (f"{p}+{p}=", f"{2 * p}") for p in range(4)
    }

    card = to_dataset(store, tmp_path / "prompts", format="prompts", text=True, test_fraction=0.0)
    assert card["removed"] == {"exact_dup": 12} and card["rows_out"] == {"train": 4}
    assert sorted(r["prompt"] for r in load_from_disk(str(tmp_path / "prompts"))["train"]) == [
        f"{p}+{p}=" for p in range(4)
    ]
    with pytest.raises(TraceError, match="--score NAME"):
        to_dataset(store, tmp_path / "x", format="kto")


def test_exact_and_near_duplicates_are_removed_and_redaction_runs_again(tmp_path):
    store = MemoryStore()
    base = "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm afternoon sun near the river bank"
    texts = [
        base,
        base,
        base + " today",
        "A completely different sentence about arithmetic and calculators and tools.",
    ]
    for i, t in enumerate(texts):
        store.write([ActionRecord("llm_call", "chat", id=f"r{i}", trace_id=f"t{i}", inputs=[text_message("user", t)],
                                  outputs=[text_message("assistant", "write to ann@example.com")])])  # fmt: skip
    card = to_dataset(store, tmp_path / "exact", format="sft", test_fraction=0.0)
    assert card["removed"] == {"exact_dup": 1} and card["rows_out"] == {"train": 3}
    assert card["redactions"] == 4  # the store held raw text: redacted at conversion (4 rows made)
    rows = list(load_from_disk(str(tmp_path / "exact"))["train"])
    assert all(r["messages"][1]["content"] == "write to [REDACTED:email]" for r in rows)
    card = to_dataset(store, tmp_path / "near", format="sft", near_dup=0.7, test_fraction=0.0)
    assert card["removed"] == {"exact_dup": 1, "near_dup": 1} and card["rows_out"] == {"train": 2}


def test_a_jsonl_store_larger_than_a_bucket_streams_by_trace(tmp_path, monkeypatch):
    from toolbox.tracing.stores import jsonl

    monkeypatch.setattr(jsonl, "BUCKET_BYTES", 2000)  # force the spill into many buckets
    path = tmp_path / "t.jsonl"
    with open_store(path) as store:
        for i in range(60):  # the two calls of a trace far apart in the file
            store.write([ActionRecord("llm_call", "chat", id=f"a{i}", trace_id=f"t{i}", start_time=i,
                                      inputs=[text_message("user", f"q{i}")], outputs=[text_message("assistant", f"a{i}")])])  # fmt: skip
        for i in range(60):
            store.write([ActionRecord("llm_call", "chat", id=f"b{i}", trace_id=f"t{i}", start_time=100 + i,
                                      inputs=[text_message("user", f"q{i}"), text_message("assistant", f"a{i}"), text_message("user", "more")],
                                      outputs=[text_message("assistant", "done")])])  # fmt: skip
    assert path.stat().st_size > 10 * 2000
    card = to_dataset(path, tmp_path / "d", test_fraction=0.0)
    assert card["traces_in"] == 60 and card["removed"] == {"continued_in_later_call": 60}
    assert all(len(r["messages"]) == 4 for r in load_from_disk(str(tmp_path / "d"))["train"])


def test_our_chat_dataset_scores_the_tool_call_and_the_supervised_trainer_trains(
    sft_dir, tmp_path, tiny, tool_tokenizer
):
    from toolbox.core.events import Event
    from toolbox.data.datasets.chat import Chat
    from toolbox.experiment import ExperimentBuilder, load_config

    rows = list(load_from_disk(str(sft_dir))["train"])
    tok = tool_tokenizer(rows)
    [ex] = Chat(tok)([rows[0]])
    scored = tok.decode([t for t, m in zip(ex["input_ids"], ex["completion_mask"], strict=True) if m])
    call = rows[0]["messages"][2]["tool_calls"][0]["function"]
    assert f"<call>calculator{call['arguments']}</call>" in scored
    assert rows[0]["messages"][4]["content"] in scored and "Use the calculator" not in scored

    overrides = [o for o in tiny if not o.startswith("data.source")] + [
        "data=local", f"data.source.path={sft_dir}", "data.dataset.name=chat", "data.dataset.max_length=640",
        "trainer.max_steps=6", "trainer.batch_size=4", "optimizer.lr=1e-2", f"run_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    losses = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: losses.append(d.metrics["loss"]))
    parts.trainer.fit()
    assert len(losses) == 6 and losses[-1] < losses[0]
