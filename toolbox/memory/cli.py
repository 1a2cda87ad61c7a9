"""``toolbox memory add | search | stats | export``: an episodic memory store from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from toolbox.core.errors import ConfigError


def _spec(text: str | None, what: str) -> dict[str, Any] | None:
    """A component config from ``NAME`` or a JSON object (``'{"name": "hnsw", "ef_search": 128}'``)."""
    if text is None:
        return None
    if text.lstrip().startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--{what}: not valid JSON ({e}); give a name or a JSON object.") from None
        if not isinstance(spec, dict) or "name" not in spec:
            raise ConfigError(f"--{what}: a JSON config needs a 'name' key, got {text!r}.")
        return spec
    return {"name": text}


def _filters(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f'--filter: not valid JSON ({e}); for example --filter \'{{"kind": "eval_failure"}}\'.'
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"--filter: expected a JSON object, got {text!r}.")
    return value


def _meta(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--meta: expected key=value, got {pair!r}.")
        try:
            out[key] = json.loads(value)  # numbers, booleans, lists stay typed
        except json.JSONDecodeError:
            out[key] = value
    return out


def _open(args: argparse.Namespace):
    from toolbox.memory.store import EpisodicMemory

    store = Path(args.store)
    if args.command_memory != "add" and not (store / "memory.sqlite").is_file():
        raise ConfigError(
            f"--store: {store} is not a memory store; create one with `toolbox memory add --store {store} ...`."
        )
    return EpisodicMemory(
        store,
        embedder=_spec(getattr(args, "embedder", None), "embedder"),
        index=_spec(getattr(args, "index", None), "index"),
    )


def cmd_add(args: argparse.Namespace) -> int:
    records: list[dict[str, Any]] = []
    if args.jsonl:
        path = Path(args.jsonl)
        if not path.is_file():
            raise ConfigError(f"--jsonl: {path} does not exist.")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"--jsonl: {path}:{n} is not JSON ({e}).") from None
            if not isinstance(record, dict) or "text" not in record:
                raise ConfigError(
                    f'--jsonl: {path}:{n} needs a \'text\' field: {{"text": ..., "metadata": {{...}}}}.'
                )
            records.append(record)
    meta = _meta(args.meta)
    records += [{"text": t, "metadata": meta} for t in args.text]
    if not records:
        raise ConfigError("toolbox memory add: give texts to add, or --jsonl FILE.")
    with _open(args) as memory:
        ids = memory.add_many(
            [r["text"] for r in records],
            [{**meta, **(r.get("metadata") or {})} for r in records],
            [r.get("timestamp", args.timestamp) for r in records],
            [float(r.get("importance", args.importance)) for r in records],
        )
        print(json.dumps({"ids": ids, "items": len(memory)}))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _open(args) as memory:
        items = memory.search(
            args.query,
            k=args.k,
            filters=_filters(args.filter),
            recency_half_life=args.recency_half_life,
            recency_weight=args.recency_weight,
            text_weight=args.text_weight,
            min_score=args.min_score,
        )
        for item in items:
            print(json.dumps(item.to_dict(), ensure_ascii=False))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as memory:
        stats = memory.stats()
        if args.check:
            stats["check"] = memory.check()
        print(json.dumps(stats, indent=2))
    return 0 if not args.check or stats["check"]["ok"] else 1


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as memory:
        n = memory.export(args.out, filters=_filters(args.filter))
    print(json.dumps({"out": args.out, "items": n}), file=sys.stdout)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    memory = sub.add_parser("memory", help="episodic memory: add, search, stats, export")
    msub = memory.add_subparsers(dest="command_memory", required=True, metavar="ACTION")

    def store_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", required=True, help="the store's folder")
        p.add_argument(
            "--index", help="vector index: exact | hnsw | a JSON config (default: the store's own)"
        )

    p = msub.add_parser("add", help="add texts (or a JSONL file of records) to a store, creating it if new")
    store_args(p)
    p.add_argument("text", nargs="*", help="texts to add, one memory each")
    p.add_argument(
        "--jsonl",
        help='a file of records: {"text": ..., "metadata": {...}, "timestamp": ..., "importance": ...}',
    )
    p.add_argument(
        "--meta", action="append", default=[], help="metadata key=value for every added text (repeatable)"
    )
    p.add_argument("--timestamp", help="the memories' time (epoch seconds or ISO 8601; default: now)")
    p.add_argument("--importance", type=float, default=0.0, help="importance (for eviction=importance)")
    p.add_argument(
        "--embedder", help="embedder of a new store: hashing | minilm | a JSON config (default: the store's)"
    )
    p.set_defaults(fn=cmd_add)

    p = msub.add_parser("search", help="the best memories for a query, one JSON line each")
    store_args(p)
    p.add_argument("query", help="the query text")
    p.add_argument("-k", type=int, default=5, help="how many memories")
    p.add_argument(
        "--filter", help='a metadata filter as JSON, e.g. \'{"kind": "eval_failure", "step": {"gte": 100}}\''
    )
    p.add_argument("--recency-half-life", type=float, help="seconds after which the recency bonus halves")
    p.add_argument("--recency-weight", type=float, default=0.2, help="weight of the recency bonus")
    p.add_argument("--text-weight", type=float, default=0.0, help="weight of the BM25 text match (0: off)")
    p.add_argument("--min-score", type=float, help="drop memories below this cosine similarity")
    p.set_defaults(fn=cmd_search)

    p = msub.add_parser("stats", help="a store's size, embedder, index and fields as JSON")
    store_args(p)
    p.add_argument(
        "--check", action="store_true", help="also compare the index with SQLite (exit 1 if they differ)"
    )
    p.set_defaults(fn=cmd_stats)

    p = msub.add_parser("export", help="write a store's items as JSON lines")
    store_args(p)
    p.add_argument("--out", required=True, help="the .jsonl file to write (atomically)")
    p.add_argument("--filter", help="export only the items matching this JSON filter")
    p.set_defaults(fn=cmd_export)
