"""Trace stores that survive one bad line (issue 37): a record without a field, a field of the wrong
type, a cut score line. Every ``toolbox traces`` command skips it with a warning and goes on; the
dataset's ``card.json`` counts what was skipped, by reason; and ``stats`` and ``to-dataset`` read
the same records (one validation, ``toolbox.tracing.validate``)."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from toolbox.cli import main
from toolbox.tracing import Tracer, open_store

BAD_LINES = [
    # kind and id, no name: a KeyError in stats and to-dataset before
    {"id": "bad1", "kind": "llm_call", "trace_id": "t-bad1"},
    # wrong field types: stats crashed adding a string to a count, to-dataset took it silently
    {"id": "bad2", "kind": "llm_call", "name": "chat", "trace_id": "t-bad2", "input_tokens": "12"},
    {"id": "bad3", "kind": "llm_call", "name": "chat", "trace_id": "t-bad3", "start_time": "yesterday"},
    {"id": "bad4", "kind": "llm_call", "name": "chat", "trace_id": "t-bad4", "tags": "x"},
    {"id": "bad5", "kind": 5, "name": "chat", "trace_id": "t-bad5"},
    {"id": "bad6", "kind": "llm_call", "name": "chat", "trace_id": "t-bad6", "start_time": 1e300},
]
REASONS = {
    "missing field name": 1,
    "field input_tokens: not a count": 1,
    "field start_time: not a number": 2,
    "field tags: not a list": 1,
    "field kind: not a non-empty string": 1,
}


@pytest.fixture
def bad_jsonl(tmp_path, record_runs):
    """A JSONL store of 6 recorded runs (24 records) with six bad records and two bad score lines."""
    path = tmp_path / "t.jsonl"
    with Tracer(path) as tracer:
        record_runs(tracer, n=6)
    first = json.loads(path.read_text().splitlines()[0])
    with open(path, "a") as f:
        for d in BAD_LINES:
            f.write(json.dumps(d) + "\n")
        f.write(json.dumps({"_score": first["id"], "name": "q", "value": [1]}) + "\n")
        f.write('{"_score":"' + first["id"] + '","name":"q","va\n')  # a score line cut by a crash
    return path


def _quiet_run(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "command",
    [
        ["traces", "ls", "{store}"],
        ["traces", "stats", "{store}"],
        ["traces", "export", "{store}", "--format", "jsonl", "--out", "{tmp}/e.jsonl"],
        ["traces", "export", "{store}", "--format", "otlp", "--out", "{tmp}/e.otlp"],
        ["traces", "show", "{store}", "{trace}"],
        ["traces", "to-dataset", "{store}", "--out", "{tmp}/d", "--test-fraction", "0"],
    ],
)
def test_every_command_skips_a_malformed_record_with_a_warning(bad_jsonl, tmp_path, capsys, caplog, command):
    trace = json.loads(bad_jsonl.read_text().splitlines()[0])["trace_id"]
    args = [a.format(store=bad_jsonl, tmp=tmp_path, trace=trace) for a in command]
    with caplog.at_level(logging.WARNING):
        code, out, _ = _quiet_run(args, capsys)
    assert code == 0
    assert "skipped 1 record(s): missing field name" in caplog.text
    assert "skipped 2 record(s): field start_time: not a number" in caplog.text
    assert "skipped 1 score(s): not JSON (a cut line)" in caplog.text  # dropped silently before
    if command[1] == "stats":
        stats = json.loads(out)
        assert stats["records"] == 24 and stats["traces"] == 6
        assert stats["skipped"]["records"] == REASONS
        assert stats["skipped"]["scores"] == {
            "not JSON (a cut line)": 1,
            "score: value not a number, string or boolean": 1,
        }


def test_the_card_counts_skipped_records_and_scores_by_reason(bad_jsonl, tmp_path, capsys):
    out = tmp_path / "d"
    assert main(["traces", "to-dataset", str(bad_jsonl), "--out", str(out), "--test-fraction", "0"]) == 0
    capsys.readouterr()
    card = json.loads((out / "card.json").read_text())
    assert card["records_in"] == 24
    assert card["skipped"] == {
        "records": REASONS,
        "scores": {"not JSON (a cut line)": 1, "score: value not a number, string or boolean": 1},
    }
    assert "missing field name" in (out / "README.md").read_text()


def test_stats_and_to_dataset_read_the_same_records_of_a_sqlite_store(tmp_path, record_runs, capsys):
    """A row written behind the store's back (another tool, an old version): both commands skip it."""
    path = tmp_path / "t.sqlite"
    with Tracer(path) as tracer:
        record_runs(tracer, n=6)
    con = sqlite3.connect(path)
    cols = [r[1] for r in con.execute("PRAGMA table_info(records)")]
    row = {c: None for c in cols}
    for d in BAD_LINES[:2]:
        row.update(id=d["id"], trace_id=d["trace_id"], kind=d["kind"], start_time=0.0, data=json.dumps(d))
        if "name" in row:
            row["name"] = d.get("name", "")
        con.execute(
            f"INSERT INTO records ({','.join(row)}) VALUES ({','.join('?' * len(row))})", list(row.values())
        )  # noqa: E501
    con.commit()
    con.close()
    assert main(["traces", "stats", str(path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["records"] == 24
    assert stats["skipped"]["records"] == {"missing field name": 1, "field input_tokens: not a count": 1}
    out = tmp_path / "d"
    assert main(["traces", "to-dataset", str(path), "--out", str(out), "--test-fraction", "0"]) == 0
    capsys.readouterr()
    card = json.loads((out / "card.json").read_text())
    assert card["records_in"] == stats["records"]
    assert card["skipped"]["records"] == stats["skipped"]["records"]


def test_a_record_to_dataset_accepts_is_one_stats_reads(tmp_path, capsys):
    """Odd but valid values (no tokens, no end, a categorical and a boolean score) pass both."""
    path = tmp_path / "t.jsonl"
    odd = {
        "id": "o1",
        "kind": "llm_call",
        "name": "chat",
        "trace_id": "t1",
        "inputs": "2+2=",
        "outputs": "4",
        "start_time": 0,
        "scores": [
            {"name": "label", "value": "good"},
            {"name": "correct", "value": True},
            {"name": "reward", "value": 1},
        ],
    }
    path.write_text(json.dumps(odd) + "\n")
    assert main(["traces", "stats", str(path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["records"] == 1 and stats["scores"]["label"] == {"count": 1, "categories": {"good": 1}}
    assert (
        main(["traces", "to-dataset", str(path), "--out", str(tmp_path / "d"), "--test-fraction", "0"]) == 0
    )
    card = json.loads(capsys.readouterr().out)
    assert card["records_in"] == 1 and card["rows_out"] == {"train": 1}
    with open_store(path, readonly=True) as store:
        assert [r.id for r in store.query()] == ["o1"]
