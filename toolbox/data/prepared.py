"""The data stage's output: records, data facts and the tokenizer, written once, read by later stages.

``toolbox data --out DIR`` writes::

    DIR/train.jsonl  DIR/test.jsonl  DIR/facts.json  DIR/tokenizer/

(a graph source's PyG graphs go into ``DIR/graphs.pt`` instead of the two jsonl files: see
``toolbox.data.graphs``)

atomically (a temp folder renamed into place), and the train and eval stages read it back through
the ``prepared`` source and the ``pretrained`` tokenizer, so every stage sees exactly the same data
and vocabulary.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from toolbox.core.atomic import fsync_dir
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.graphs import GRAPHS_FILE, is_graph, load_graphs, save_graphs


def _write_jsonl(path: Path, records: Any) -> None:
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_prepared(out: Path, splits: Splits | None, tokenizer: Any) -> Path:
    """``splits`` None (a run that learns from an environment, not a data set): no records."""
    out = Path(out)
    splits = splits if splits is not None else Splits([], [], {})
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if any(is_graph(r) for r in (*splits.train[:1], *splits.test[:1])):  # PyG graphs: one torch file
        save_graphs(tmp / GRAPHS_FILE, splits)
    else:
        _write_jsonl(tmp / "train.jsonl", splits.train)
        _write_jsonl(tmp / "test.jsonl", splits.test)
    (tmp / "facts.json").write_text(json.dumps(splits.facts, sort_keys=True, indent=2) + "\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp / "tokenizer")
    fsync_dir(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid JSON ({e.msg}).") from None
    return records


@SOURCES.register("prepared")
def prepared(path: str) -> Splits:
    """The output folder of ``toolbox data`` (train.jsonl, test.jsonl, facts.json; or graphs.pt, facts.json).

    Args:
        path: the folder ``toolbox data --out`` wrote.
    """
    root = Path(path)
    if (root / GRAPHS_FILE).is_file() and (root / "facts.json").is_file():
        train, test = load_graphs(root / GRAPHS_FILE)
        return Splits(train, test, json.loads((root / "facts.json").read_text()))
    missing = [n for n in ("train.jsonl", "test.jsonl", "facts.json") if not (root / n).is_file()]
    if missing:
        raise DataError(
            f"data.source.path: {root} lacks {', '.join(missing)}; run `toolbox data --out {root}` first."
        )
    facts = json.loads((root / "facts.json").read_text())
    return Splits(_read_jsonl(root / "train.jsonl"), _read_jsonl(root / "test.jsonl"), facts)
