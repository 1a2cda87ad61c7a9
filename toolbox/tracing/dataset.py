"""Trace → dataset: training rows in TRL's formats out of a trace store, streamed.

    card = to_dataset("traces.sqlite", "data/traces_sft", format="sft",
                      filters=RecordFilter(scores=["correct==true"]), near_dup=0.9)

Formats (each row from the model calls, ``llm_call`` records, of one trace):

- ``sft``: ``{"messages": [...], "tools": "<JSON>"}``, the chat format TRL's SFTTrainer takes
  (``toolbox.tracing.record.messages_to_chat``: assistant ``tool_calls`` with ids, ``role: tool``
  replies with ``tool_call_id``). One row per conversation: a model call whose conversation
  (inputs + outputs) is the start of a later call's inputs in the same trace is part of that
  later row, not a row of its own. A row with a tool call and no reply of the same id, or a reply
  to no call, is dropped (rule ``unmatched_tool_call``): rows are lossless. With
  ``final_calls=True`` a row may end in the model call's own tool calls (their replies came in a
  later call that the filters removed): a step's row, e.g. an agent's right call before a wrong
  answer when each model call is filtered by its own reward. ``complete_calls`` (a template holding
  ``RESULT``) completes such a row whose reply the trace recorded: the tool's reply, then the
  template with the reply in place of ``RESULT`` as the final assistant turn (``toolbox.tracing.training_rows``).
- ``preference``: ``{"prompt", "chosen", "rejected"}`` from sibling generations (model calls with
  the same parent and the same inputs, as a GRPO group), the best and the worst by ``score``;
  groups whose best does not beat the worst by more than ``margin`` give none.
- ``kto``: ``{"prompt", "completion", "label"}``, one per scored model call, label = the score
  passes ``label_threshold`` (a boolean score: its value).
- ``prompts``: ``{"prompt"}`` of each model call, for RL.

(The rows: ``toolbox.tracing.training_rows``; this file runs the conversion and keeps its card.)

Prompts and completions are message lists (TRL's conversational form); ``text=True`` makes a
prompt of one user message and a completion of one assistant message plain strings.

Then: the filters (``RecordFilter``), redaction again (the built-in redactor unless ``redact=None``),
exact and near-duplicate removal (``Deduper``), and a split by session (the session id, else the
trace id, hashed: no session is in both splits). Traces are read one at a time
(``TraceStore.traces``) and rows stream into ``datasets``' Arrow writer (``toolbox.tracing.writer``),
so memory does not grow with the store. The folder
(``save_to_disk``, written beside and renamed into place) gets ``card.json`` and ``README.md``:
records and traces read, rows made, removed by each rule, and kept per split. Nothing is written
when no row is left; the error names the rule that removed the most.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import toolbox.core.json_codec as codec
from toolbox.tracing.record import TraceError
from toolbox.tracing.record_filters import RecordFilter, TraceIndex
from toolbox.tracing.redact import Redactor, default_redactor
from toolbox.tracing.row_dedupe import Deduper
from toolbox.tracing.stores import Query, TraceStore, open_store
from toolbox.tracing.training_rows import FORMATS, RowMaker
from toolbox.tracing.writer import SplitWriter, features_for, misfit

__all__ = ["FORMATS", "Card", "to_dataset"]


@dataclass
class Card:
    """What the conversion did, per rule."""

    source: str
    format: str
    records: int = 0
    traces: int = 0
    candidates: int = 0
    removed: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    redactions: int = 0
    skipped: dict[str, dict[str, int]] = field(default_factory=lambda: {"records": {}, "scores": {}})
    seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)

    def drop(self, rule: str) -> None:
        self.removed[rule] = self.removed.get(rule, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "records_in": self.records,
            "traces_in": self.traces,
            "rows_made": self.candidates,
            "removed": dict(sorted(self.removed.items())),
            "rows_out": self.splits,
            "redactions": self.redactions,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "settings": self.settings,
        }

    def markdown(self) -> str:
        lines = [
            f"# Dataset from traces ({self.format})",
            "",
            f"Source: `{self.source}`. Records read: {self.records} in {self.traces} traces; "
            f"candidate rows: {self.candidates}; redactions: {self.redactions}.",
            "",
            "| skipped (not a record or score) | count |",
            "|---|---|",
            *[f"| {what}: {k} | {v} |" for what, d in self.skipped.items() for k, v in d.items()],
            "",
            "| removed by | rows |",
            "|---|---|",
            *[f"| {k} | {v} |" for k, v in sorted(self.removed.items())],
            "",
            "| split | rows |",
            "|---|---|",
            *[f"| {k} | {v} |" for k, v in self.splits.items()],
            "",
            "Settings: `" + json.dumps(self.settings, sort_keys=True) + "`",
            "",
        ]
        return "\n".join(lines)


# -- the conversion -------------------------------------------------------------------------------
def _test_side(session: str, fraction: float, seed: int) -> bool:
    h = hashlib.blake2b(f"{seed}:{session}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < fraction


def to_dataset(
    store: TraceStore | str | Path,
    out: str | Path,
    format: str = "sft",
    filters: RecordFilter | None = None,
    query: Query | None = None,
    score: str | None = None,
    margin: float = 0.0,
    label_threshold: float = 0.5,
    text: bool = False,
    redact: Redactor | Callable | None = default_redactor,
    exact_dup: bool = True,
    near_dup: float | None = None,
    final_calls: bool = False,
    complete_calls: str | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    progress: bool = False,
    overwrite: bool = True,
) -> dict[str, Any]:
    """Convert a store's traces into a ``datasets`` folder at ``out`` (see the module docstring);
    returns the card as a dict."""
    start = time.perf_counter()
    owns = not isinstance(store, TraceStore)
    src = open_store(store, readonly=True) if owns else store
    filters = filters or RecordFilter()
    if filters.kinds is None:
        filters.kinds = ["llm_call"]
    if not 0.0 <= test_fraction < 1.0:
        raise TraceError(f"test_fraction {test_fraction}; choose a fraction in [0, 1).")
    out = Path(out)
    if out.exists() and not overwrite:
        raise TraceError(f"{out} exists; remove it or pass overwrite.")
    card = Card(
        source=str(src.path),
        format=format,
        settings={
            "filters": {
                "kinds": list(filters.kinds),
                "names": list(filters.names) if filters.names is not None else None,
                "tags": list(filters.tags),
                "exclude_tags": list(filters.exclude_tags),
                "since": filters.since,
                "until": filters.until,
                "drop_errors": filters.drop_errors,
                "scores": [str(s) for s in filters.scores],
            },
            "score": score,
            "margin": margin,
            "label_threshold": label_threshold,
            "text": text,
            "redact": redact is not None,
            "exact_dup": exact_dup,
            "near_dup": near_dup,
            "final_calls": final_calls,
            "test_fraction": test_fraction,
            "seed": seed,
        },
    )
    if complete_calls is not None:  # only when set: cards of other conversions keep their keys
        card.settings["complete_calls"] = complete_calls
    maker = RowMaker(
        format,
        score,
        margin,
        label_threshold,
        text,
        card.drop,
        final_calls=final_calls,
        complete_calls=complete_calls,
    )
    deduper = Deduper(exact=exact_dup, near=near_dup)
    redactor = redact if isinstance(redact, Redactor) else None
    if redactor is not None:
        redactor = Redactor([(label, r.pattern) for label, r in redactor.rules])  # its own count
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=src.count(query), unit="rec", desc=f"to-dataset {format}", mininterval=0.5)
    writer = SplitWriter(out)
    features = None
    kinds = frozenset(filters.kinds)
    try:
        try:
            for group in src.traces(query):
                card.records += len(group)
                card.traces += 1
                if bar is not None:
                    bar.update(len(group))
                index = TraceIndex(group)
                calls = []
                for r in group:
                    if r.kind not in kinds:
                        continue  # not a candidate (tool calls, agent roots): no rule counts it
                    rule = filters.check(r, index)
                    if rule is None:
                        calls.append(r)
                    else:
                        card.drop(rule)
                for r, row in maker.rows(calls, index):
                    card.candidates += 1
                    if redactor is not None:
                        row, line = _redacted_line(row, redactor)
                    else:
                        if redact is not None:
                            row = redact(row)
                        line = _line(row)
                    rule = deduper.check(row, line)
                    if rule is not None:
                        card.drop(rule)
                        continue
                    if features is None:
                        features = features_for(format, row)
                    bad = misfit(row, features)
                    if bad is not None:
                        card.drop(f"mixed_{bad}_shape")
                        continue
                    split = "test" if _test_side(r.session_id or r.trace_id, test_fraction, seed) else "train"
                    writer.add(split, row, features)
        finally:
            if bar is not None:
                bar.close()
            if owns:
                src.close()
        card.redactions = redactor.count if redactor is not None else 0
        card.skipped = src.skips.to_dict()
        if not any(writer.counts.values()):
            raise TraceError(_empty_message(card, filters))
        card.splits = writer.save(progress=progress)
        card.seconds = time.perf_counter() - start
        writer.publish(card.to_dict(), card.markdown())
    finally:
        writer.close()
    return card.to_dict()


def _line(row: dict[str, Any], plain: bool | None = None) -> str:
    """A row as JSON: orjson where its values are plain (``plain``: already ``codec.scan``ned), else
    the json module. Rows of one format have one key order, so equal rows give equal lines, which
    exact dedupe compares."""
    line = codec.dumps_plain(row) if (codec.scan(row, []) if plain is None else plain) else None
    return line if line is not None else json.dumps(row, ensure_ascii=False)


def _redacted_line(row: dict[str, Any], redactor: Redactor) -> tuple[dict[str, Any], str]:
    """The row, redacted where its strings may hold a secret (the pre-check reads only its strings,
    not its keys), and its line."""
    texts: list[str] = []
    plain = codec.scan(row, texts)
    if plain and not redactor.needed_any(texts):
        return row, _line(row, plain=True)
    row = redactor.value(row)
    return row, _line(row)


def _empty_message(card: Card, filters: RecordFilter) -> str:
    where = f"{card.source}: "
    if card.records == 0:
        return (
            where + "the store holds no records matching the query; nothing to convert (no dataset written)."
        )
    if not card.removed:
        return (
            where + f"no {'/'.join(filters.kinds or [])} records among its {card.records} records; "
            "nothing to convert (no dataset written). Record model calls as kind llm_call."
        )
    rule, n = max(card.removed.items(), key=lambda kv: kv[1])
    others = ", ".join(f"{k}: {v}" for k, v in sorted(card.removed.items()) if k != rule)
    return (
        where
        + f"every row was filtered out (no dataset written); the filter {rule!r} removed {n}"
        + (f" (others: {others})" if others else "")
        + "; loosen it."
    )
