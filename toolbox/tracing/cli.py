"""``toolbox traces``: list, show, summarise, export and convert trace stores.

toolbox traces ls traces.sqlite --kind llm_call --limit 20
toolbox traces show traces.sqlite ID           # a record, or a whole trace by its trace id
toolbox traces stats traces.sqlite
toolbox traces export traces.sqlite --format otlp --out traces.otlp.jsonl
toolbox traces to-dataset traces.sqlite --format sft --out data/traces_sft --where correct==true
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _time(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        from toolbox.tracing.record import TraceError

        raise TraceError(
            f"time {text!r}: give seconds since the epoch or ISO 8601 (2026-12-01T18:00)."
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


def _query(args: argparse.Namespace):
    from toolbox.tracing.stores.base import Query

    return Query(
        trace_id=getattr(args, "trace", None),
        session_id=getattr(args, "session", None),
        kind=getattr(args, "kind", None),
        name=getattr(args, "name", None),
        since=_time(getattr(args, "since", None)),
        until=_time(getattr(args, "until", None)),
        tag=getattr(args, "tag", None),
        score=getattr(args, "score_name", None),
        min_score=getattr(args, "min_score", None),
        max_score=getattr(args, "max_score", None),
        limit=getattr(args, "limit", None),
    )


def _add_query(p: argparse.ArgumentParser, limit: int | None = None) -> None:
    p.add_argument("--kind", help="llm_call, tool_call, agent, decision, env_step, custom")
    p.add_argument("--name")
    p.add_argument("--trace", help="a trace id")
    p.add_argument("--session", help="a session id")
    p.add_argument("--tag")
    p.add_argument("--since", help="start time >= (epoch seconds or ISO 8601, UTC)")
    p.add_argument("--until", help="start time < (epoch seconds or ISO 8601, UTC)")
    p.add_argument("--score-name", help="records with a score of this name")
    p.add_argument("--min-score", type=float)
    p.add_argument("--max-score", type=float)
    p.add_argument("--limit", type=int, default=limit)


def _iso(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _scores(r) -> str:
    return " ".join(f"{s.name}={s.value}" for s in r.scores)


def cmd_ls(args: argparse.Namespace) -> int:
    from toolbox.tracing.stores import open_store

    with open_store(args.store, readonly=True) as store:
        print(f"{'id':16}  {'trace':32}  {'kind':9}  {'name':24}  {'start (UTC)':24}  {'ms':>8}  scores")
        for r in store.query(_query(args)):
            ms = f"{r.latency_s * 1000:.1f}" if r.latency_s is not None else "-"
            err = "  ERROR" if r.error else ""
            print(
                f"{r.id:16}  {r.trace_id:32}  {r.kind:9}  {r.name[:24]:24}  {_iso(r.start_time):24}  {ms:>8}  {_scores(r)}{err}"
            )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from toolbox.tracing.record import TraceError
    from toolbox.tracing.stores import Query, open_store

    with open_store(args.store, readonly=True) as store:
        record = store.get(args.id)
        records = [record] if record is not None else list(store.query(Query(trace_id=args.id)))
        if not records:
            raise TraceError(
                f"{args.store}: no record or trace with id {args.id}; list them with `toolbox traces ls {args.store}`."
            )
        if record is not None and not args.trace:
            print(json.dumps(record.to_dict(), indent=2, ensure_ascii=False))
            return 0
        if record is not None:
            records = list(store.query(Query(trace_id=record.trace_id)))
    children: dict[str | None, list] = {}
    ids = {r.id for r in records}
    for r in records:
        children.setdefault(r.parent_id if r.parent_id in ids else None, []).append(r)

    def tree(parent: str | None, depth: int) -> None:
        for r in children.get(parent, ()):
            ms = f" {r.latency_s * 1000:.1f} ms" if r.latency_s is not None else ""
            print(
                f"{'  ' * depth}{r.kind} {r.name} [{r.id}]{ms} {_scores(r)}{'  ERROR: ' + r.error if r.error else ''}"
            )
            if args.verbose:
                for label, v in (("in", r.inputs), ("out", r.outputs)):
                    if v is not None:
                        print(f"{'  ' * (depth + 1)}{label}: {json.dumps(v, ensure_ascii=False)[:2000]}")
            tree(r.id, depth + 1)

    tree(None, 0)
    return 0


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def cmd_stats(args: argparse.Namespace) -> int:
    from toolbox.tracing.stores import open_store

    kinds: dict[str, dict[str, Any]] = {}
    scores: dict[str, list] = {}
    traces, sessions, errors = set(), set(), 0
    first, last = None, None
    with open_store(args.store, readonly=True) as store:
        for r in store.query(_query(args)):
            k = kinds.setdefault(
                r.kind, {"records": 0, "errors": 0, "input_tokens": 0, "output_tokens": 0, "latency": []}
            )
            k["records"] += 1
            k["errors"] += bool(r.error)
            errors += bool(r.error)
            k["input_tokens"] += r.input_tokens or 0
            k["output_tokens"] += r.output_tokens or 0
            if r.latency_s is not None:
                k["latency"].append(r.latency_s)
            traces.add(r.trace_id)
            if r.session_id:
                sessions.add(r.session_id)
            first = r.start_time if first is None else min(first, r.start_time)
            last = r.start_time if last is None else max(last, r.start_time)
            for s in r.scores:
                scores.setdefault(s.name, []).append(s.value)
        skipped = store.skips.to_dict()
    out: dict[str, Any] = {
        "store": str(args.store),
        "records": sum(k["records"] for k in kinds.values()),
        "traces": len(traces),
        "sessions": len(sessions),
        "errors": errors,
        "first": _iso(first),
        "last": _iso(last),
        "kinds": {},
        "scores": {},
        "skipped": skipped,
    }
    for name, k in sorted(kinds.items()):
        lat = k.pop("latency")
        if lat:
            k["latency_ms_p50"] = round(_percentile(lat, 0.5) * 1000, 3)
            k["latency_ms_p95"] = round(_percentile(lat, 0.95) * 1000, 3)
        out["kinds"][name] = k
    for name, values in sorted(scores.items()):
        nums = [float(v) for v in values if not isinstance(v, str)]
        entry: dict[str, Any] = {"count": len(values)}
        if nums:
            entry["mean"] = round(statistics.fmean(nums), 6)
        cats = [v for v in values if isinstance(v, str)]
        if cats:
            entry["categories"] = {c: cats.count(c) for c in sorted(set(cats))}
        out["scores"][name] = entry
    print(json.dumps(out, indent=2))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from toolbox.core.atomic import fsync_dir
    from toolbox.tracing.record import dumps
    from toolbox.tracing.stores import open_store

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}")
    n = 0
    with open_store(args.store, readonly=True) as store, open(tmp, "w", encoding="utf-8") as f:
        if args.format == "jsonl":
            for r in store.query(_query(args)):
                f.write(dumps(r) + "\n")
                n += 1
        else:
            from toolbox.tracing.otel import to_otlp_json

            batch = []
            for r in store.query(_query(args)):
                batch.append(r)
                if len(batch) >= args.batch:
                    f.write(to_otlp_json(batch) + "\n")
                    n += len(batch)
                    batch = []
            if batch:
                f.write(to_otlp_json(batch) + "\n")
                n += len(batch)
    tmp.replace(out)
    fsync_dir(out.parent)
    print(json.dumps({"out": str(out), "format": args.format, "records": n}))
    return 0


def cmd_to_dataset(args: argparse.Namespace) -> int:
    from toolbox.tracing.dataset import to_dataset
    from toolbox.tracing.record_filters import RecordFilter
    from toolbox.tracing.redact import default_redactor

    filters = RecordFilter(
        kinds=args.kinds,
        names=args.names,
        tags=args.tags or (),
        exclude_tags=args.exclude_tags or (),
        since=_time(args.since),
        until=_time(args.until),
        drop_errors=not args.keep_errors,
        scores=args.where or [],
    )
    card = to_dataset(
        args.store,
        args.out,
        format=args.format,
        filters=filters,
        score=args.score,
        margin=args.margin,
        label_threshold=args.label_threshold,
        text=args.text,
        redact=None if args.no_redact else default_redactor,
        exact_dup=not args.no_exact_dup,
        near_dup=args.near_dup,
        final_calls=args.final_calls,
        complete_calls=args.complete_calls,
        test_fraction=args.test_fraction,
        seed=args.seed,
        progress=args.progress or (not args.no_progress and sys.stderr.isatty()),
    )
    print(json.dumps({"out": str(args.out), **card}, indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``toolbox traces ...`` (one call line in toolbox/cli.py)."""
    traces = sub.add_parser("traces", help="list, show, summarise, export and convert agent traces")
    tsub = traces.add_subparsers(dest="traces_command", required=True, metavar="SUBCOMMAND")

    p = tsub.add_parser("ls", help="list records (newest filters: --kind, --session, --score-name ...)")
    p.add_argument("store", help="a .jsonl or .sqlite trace store")
    _add_query(p, limit=50)
    p.set_defaults(fn=cmd_ls)

    p = tsub.add_parser("show", help="one record as JSON, or a trace as a tree (give a trace id)")
    p.add_argument("store")
    p.add_argument("id", help="a record id or a trace id")
    p.add_argument("--trace", action="store_true", help="with a record id: show its whole trace")
    p.add_argument("-v", "--verbose", action="store_true", help="print inputs and outputs in the tree")
    p.set_defaults(fn=cmd_show)

    p = tsub.add_parser("stats", help="counts, tokens, latencies and scores as JSON")
    p.add_argument("store")
    _add_query(p)
    p.set_defaults(fn=cmd_stats)

    p = tsub.add_parser("export", help="write records as OTLP JSON (one request per line) or JSONL")
    p.add_argument("store")
    p.add_argument("--format", choices=("otlp", "jsonl"), default="otlp")
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=1000, help="records per OTLP request line")
    _add_query(p)
    p.set_defaults(fn=cmd_export)

    p = tsub.add_parser("to-dataset", help="traces -> a datasets folder (sft, preference, kto, prompts)")
    p.add_argument("store")
    p.add_argument("--format", choices=("sft", "preference", "kto", "prompts"), default="sft")
    p.add_argument("--out", required=True, help="the dataset folder (save_to_disk) to write")
    p.add_argument("--where", action="append", metavar="SCORE_RULE",
                   help="keep rows whose score passes: correct==true, reward>=0.5, label!=bad (repeatable)")  # fmt: skip
    p.add_argument("--kind", dest="kinds", action="append", help="record kinds to convert (default llm_call)")
    p.add_argument("--name", dest="names", action="append", help="record names to keep (repeatable)")
    p.add_argument("--tag", dest="tags", action="append", help="records must have this tag (repeatable)")
    p.add_argument("--exclude-tag", dest="exclude_tags", action="append")
    p.add_argument("--since")
    p.add_argument("--until")
    p.add_argument("--keep-errors", action="store_true", help="keep traces in which a record has an error")
    p.add_argument("--score", help="the score that ranks (preference) or labels (kto) generations")
    p.add_argument("--margin", type=float, default=0.0, help="preference: best must beat worst by more")
    p.add_argument("--label-threshold", type=float, default=0.5, help="kto: numeric score >= this is good")
    p.add_argument("--text", action="store_true", help="one-message prompts/completions as plain strings")
    p.add_argument("--no-redact", action="store_true", help="skip the second redaction pass")
    p.add_argument("--no-exact-dup", action="store_true", help="keep exact duplicates")
    p.add_argument("--near-dup", type=float, help="drop rows with MinHash Jaccard >= this to a kept row")
    p.add_argument("--final-calls", action="store_true",
                   help="sft: keep a row that ends in the model's own tool call (a step whose later calls were filtered out)")  # fmt: skip
    p.add_argument("--complete-calls", metavar="TEMPLATE",
                   help="sft: a row ending in one tool call whose reply the trace holds gets the reply and a final "
                        "assistant turn, TEMPLATE with RESULT replaced by the reply ('The answer is RESULT.'); "
                        "implies --final-calls")  # fmt: skip
    p.add_argument("--test-fraction", type=float, default=0.1, help="share of sessions in the test split")
    p.add_argument("--seed", type=int, default=0, help="seeds the session split")
    p.add_argument("--progress", action="store_true", help="a progress bar even when stderr is no terminal")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=cmd_to_dataset)
