"""``toolbox memory add | search | stats | export``."""

from __future__ import annotations

import json

from toolbox.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_search_stats_export(tmp_path, capsys):
    store = str(tmp_path / "store")
    records = tmp_path / "in.jsonl"
    records.write_text(
        json.dumps({"text": "water boils at one hundred degrees", "metadata": {"topic": "physics"}})
        + "\n"
        + json.dumps(
            {"text": "paris is the capital of france", "metadata": {"topic": "geo"}, "importance": 2}
        )
        + "\n"
    )
    code, out, _ = run(
        capsys,
        "memory",
        "add",
        "--store",
        store,
        "--embedder",
        '{"name": "hashing", "dim": 64}',
        "--jsonl",
        str(records),
    )
    assert code == 0 and json.loads(out) == {"ids": [1, 2], "items": 2}
    code, out, _ = run(
        capsys,
        "memory",
        "add",
        "--store",
        store,
        "--meta",
        "topic=geo",
        "--meta",
        "year=2026",
        "rome is the capital of italy",
    )
    assert json.loads(out) == {"ids": [3], "items": 3}

    code, out, _ = run(
        capsys,
        "memory",
        "search",
        "--store",
        store,
        "what is the capital of france",
        "-k",
        "2",
        "--filter",
        '{"topic": "geo"}',
    )
    hits = [json.loads(x) for x in out.splitlines()]
    assert (
        code == 0
        and [h["id"] for h in hits] == [2, 3]
        and hits[1]["metadata"] == {"topic": "geo", "year": 2026}
    )

    code, out, _ = run(capsys, "memory", "stats", "--store", store, "--check")
    stats = json.loads(out)
    assert code == 0 and stats["items"] == 3 and stats["check"]["ok"] and stats["fields"] == ["topic", "year"]
    assert stats["embedder"].startswith("hashing(dim=64")

    code, out, _ = run(
        capsys,
        "memory",
        "export",
        "--store",
        store,
        "--out",
        str(tmp_path / "out.jsonl"),
        "--filter",
        '{"year": 2026}',
    )
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert code == 0 and [x["text"] for x in lines] == ["rome is the capital of italy"]

    code, _, err = run(capsys, "memory", "search", "--store", store, "x", "--filter", '{"topik": "geo"}')
    assert code == 2 and "unknown field 'topik'" in err
    code, _, err = run(capsys, "memory", "search", "--store", str(tmp_path / "none"), "x")
    assert code == 2 and "is not a memory store" in err
    code, _, err = run(
        capsys, "memory", "add", "--store", store, "--embedder", '{"name": "hashing", "dim": 32}', "more text"
    )
    assert code == 2 and "holds 64-dimensional ones" in err
