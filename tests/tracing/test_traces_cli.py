"""`toolbox traces ls | show | stats | export | to-dataset` on a recorded store."""

from __future__ import annotations

import json

from toolbox.cli import main
from toolbox.tracing import Tracer, open_store
from toolbox.tracing.otel import from_otlp_json


def test_the_traces_commands(tmp_path, capsys, record_runs):
    store = tmp_path / "t.sqlite"
    with Tracer(store) as tracer:
        record_runs(tracer, n=6)
    assert main(["traces", "ls", str(store), "--kind", "agent"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7 and "correct=" in lines[1]  # header + 6 runs with their score
    trace_id = lines[1].split()[1]

    assert main(["traces", "show", str(store), trace_id]) == 0
    tree = capsys.readouterr().out.splitlines()
    assert tree[0].startswith("agent solve") and [t.split()[0] for t in tree[1:]] == [
        "llm_call",
        "tool_call",
        "llm_call",
    ]
    assert tree[1].startswith("  ")  # children indented under the run

    assert main(["traces", "stats", str(store)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["records"] == 24 and stats["traces"] == 6 and stats["kinds"]["llm_call"]["records"] == 12
    assert stats["scores"]["correct"] == {"count": 6, "mean": round(4 / 6, 6)}

    out = tmp_path / "t.otlp.jsonl"
    assert main(["traces", "export", str(store), "--format", "otlp", "--out", str(out), "--batch", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 24
    assert len(out.read_text().splitlines()) == 3 and len(from_otlp_json(out.read_text())) == 24
    jl = tmp_path / "copy.jsonl"
    assert main(["traces", "export", str(store), "--format", "jsonl", "--out", str(jl)]) == 0
    capsys.readouterr()
    assert open_store(jl).count() == 24

    assert (
        main(
            [
                "traces",
                "to-dataset",
                str(store),
                "--format",
                "sft",
                "--out",
                str(tmp_path / "d"),
                "--where",
                "correct==true",
                "--test-fraction",
                "0",
            ]
        )
        == 0
    )
    card = json.loads(capsys.readouterr().out)
    assert card["rows_out"] == {"train": 4} and card["removed"]["score:correct==True"] == 4

    assert (
        main(["traces", "to-dataset", str(store), "--out", str(tmp_path / "e"), "--where", "correct>=2"]) == 2
    )
    assert "the filter 'score:correct>=2.0' removed 12" in capsys.readouterr().err
    (tmp_path / "bad.sqlite").write_bytes(b"x" * 200)
    assert main(["traces", "ls", str(tmp_path / "bad.sqlite")]) == 2
    assert "bad.sqlite: not a SQLite trace store, or corrupt" in capsys.readouterr().err
