"""Trace → dataset: training rows in TRL's formats out of a trace store, streamed.

    card = to_dataset("traces.sqlite", "data/traces_sft", format="sft",
                      filters=RecordFilter(scores=["correct==true"]), near_dup=0.9)

Formats (each row from the model calls, ``llm_call`` records, of one trace):

- ``sft``: ``{"messages": [...], "tools": "<JSON>"}``, the chat format TRL's SFTTrainer takes
  (``toolbox.tracing.record.messages_to_chat``: assistant ``tool_calls`` with ids, ``role: tool``
  replies with ``tool_call_id``). One row per conversation: a model call whose conversation
  (inputs + outputs) is the start of a later call's inputs in the same trace is part of that
  later row, not a row of its own. A row with a tool call and no reply of the same id, or a reply
  to no call, is dropped (rule ``unmatched_tool_call``): rows are lossless.
- ``preference``: ``{"prompt", "chosen", "rejected"}`` from sibling generations (model calls with
  the same parent and the same inputs, as a GRPO group), the best and the worst by ``score``;
  groups whose best does not beat the worst by more than ``margin`` give none.
- ``kto``: ``{"prompt", "completion", "label"}``, one per scored model call, label = the score
  passes ``label_threshold`` (a boolean score: its value).
- ``prompts``: ``{"prompt"}`` of each model call, for RL.

Prompts and completions are message lists (TRL's conversational form); ``text=True`` makes a
prompt of one user message and a completion of one assistant message plain strings.

Then: the filters (``RecordFilter``), redaction again (the built-in redactor unless ``redact=None``),
exact and near-duplicate removal (``Deduper``), and a split by session (the session id, else the
trace id, hashed: no session is in both splits). Traces are read one at a time
(``TraceStore.traces``) and rows stream through JSONL spill files into ``datasets``' Arrow writer,
so memory does not grow with the store. The folder (``save_to_disk``, written beside and renamed
into place) gets ``card.json`` and ``README.md``: records and traces read, rows made, removed by each
rule, and kept per split. Nothing is written when no row is left; the error names the rule that
removed the most.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolbox.tracing.dedupe import Deduper
from toolbox.tracing.filters import RecordFilter, TraceIndex
from toolbox.tracing.record import ActionRecord, TraceError, messages_to_chat
from toolbox.tracing.redact import Redactor, default_redactor
from toolbox.tracing.stores.base import Query, TraceStore, open_store

FORMATS = ("sft", "preference", "kto", "prompts")


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


# -- rows -----------------------------------------------------------------------------------------
def _key(messages: Any) -> list[str]:
    return (
        [json.dumps(m, sort_keys=True) for m in messages]
        if isinstance(messages, list)
        else [json.dumps(messages)]
    )


def _as_messages(value: Any, role: str) -> list[dict[str, Any]]:
    """A record's inputs/outputs as GenAI messages (a plain string becomes one text message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": role, "parts": [{"type": "text", "content": value}]}]
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    if isinstance(value, dict) and "role" in value:
        return [value]
    return [{"role": role, "parts": [{"type": "text", "content": json.dumps(value, ensure_ascii=False)}]}]


def unmatched_tool_calls(chat: list[dict[str, Any]]) -> list[str]:
    """Tool call ids without a reply, and replies without a call (both must be empty to keep a row)."""
    calls: list[str] = []
    replies: list[str] = []
    for m in chat:
        for c in m.get("tool_calls") or ():
            calls.append(c.get("id"))
        if m["role"] == "tool":
            replies.append(m.get("tool_call_id"))
    return [c for c in calls if c not in replies] + [r for r in replies if r not in calls]


def _plain(chat: list[dict[str, Any]], role: str) -> str | None:
    if len(chat) == 1 and chat[0]["role"] == role and not chat[0].get("tool_calls"):
        return chat[0]["content"]
    return None


class RowMaker:
    def __init__(
        self,
        format: str,
        score: str | None,
        margin: float,
        label_threshold: float,
        text: bool,
        card: Card,
    ) -> None:
        if format not in FORMATS:
            raise TraceError(f"format {format!r}; choose one of {', '.join(FORMATS)}.")
        if format in ("preference", "kto") and not score:
            raise TraceError(
                f"format {format}: name the score that ranks or labels generations (--score NAME)."
            )
        self.format = format
        self.score_name = score
        self.margin = margin
        self.label_threshold = label_threshold
        self.text = text
        self.card = card

    def _prompt(self, chat: list[dict[str, Any]]) -> Any:
        if self.text:
            s = _plain(chat, "user")
            if s is not None:
                return s
        return chat

    def _completion(self, chat: list[dict[str, Any]]) -> Any:
        if self.text:
            s = _plain(chat, "assistant")
            if s is not None:
                return s
        return chat

    def rows(
        self, calls: list[ActionRecord], index: TraceIndex
    ) -> Iterator[tuple[ActionRecord, dict[str, Any]]]:
        if self.format == "sft":
            yield from self._sft(calls)
        elif self.format == "preference":
            yield from self._preference(calls, index)
        elif self.format == "kto":
            yield from self._kto(calls, index)
        else:
            for r in calls:
                yield r, {"prompt": self._prompt(messages_to_chat(_as_messages(r.inputs, "user")))}

    def _sft(self, calls: list[ActionRecord]) -> Iterator[tuple[ActionRecord, dict[str, Any]]]:
        inputs = [_as_messages(r.inputs, "user") for r in calls]
        for i, r in enumerate(calls):
            messages = inputs[i] + _as_messages(r.outputs, "assistant")
            n = len(messages)
            if any(j != i and len(other) >= n and other[:n] == messages for j, other in enumerate(inputs)):
                self.card.drop("continued_in_later_call")  # part of a later call's conversation
                continue
            chat = messages_to_chat(messages)
            if unmatched_tool_calls(chat):
                self.card.drop("unmatched_tool_call")
                continue
            if not any(m["role"] == "assistant" for m in chat):
                self.card.drop("no_assistant_turn")
                continue
            yield r, {"messages": chat, "tools": json.dumps(r.tools, ensure_ascii=False) if r.tools else None}

    def _preference(
        self, calls: list[ActionRecord], index: TraceIndex
    ) -> Iterator[tuple[ActionRecord, dict]]:
        groups: dict[tuple, list[ActionRecord]] = {}
        for r in calls:
            groups.setdefault((r.parent_id, json.dumps(r.inputs, sort_keys=True)), []).append(r)
        for group in groups.values():
            scored = []
            for r in group:
                s = index.score(r, self.score_name)
                if s is None or s.data_type == "CATEGORICAL":
                    self.card.drop("unscored")
                    continue
                scored.append((float(s.value), r))
            if len(scored) < 2:
                self.card.drop("no_sibling")
                continue
            scored.sort(key=lambda t: t[0])
            (worst, rejected), (best, chosen) = scored[0], scored[-1]
            if best - worst <= self.margin:
                self.card.drop("tied_siblings")
                continue
            prompt = messages_to_chat(_as_messages(chosen.inputs, "user"))
            yield (
                chosen,
                {
                    "prompt": self._prompt(prompt),
                    "chosen": self._completion(messages_to_chat(_as_messages(chosen.outputs, "assistant"))),
                    "rejected": self._completion(
                        messages_to_chat(_as_messages(rejected.outputs, "assistant"))
                    ),
                    "score_chosen": best,
                    "score_rejected": worst,
                },
            )

    def _kto(self, calls: list[ActionRecord], index: TraceIndex) -> Iterator[tuple[ActionRecord, dict]]:
        for r in calls:
            s = index.score(r, self.score_name)
            if s is None or s.data_type == "CATEGORICAL":
                self.card.drop("unscored")
                continue
            label = bool(s.value) if s.data_type == "BOOLEAN" else float(s.value) >= self.label_threshold
            yield (
                r,
                {
                    "prompt": self._prompt(messages_to_chat(_as_messages(r.inputs, "user"))),
                    "completion": self._completion(messages_to_chat(_as_messages(r.outputs, "assistant"))),
                    "label": label,
                },
            )


# -- features ------------------------------------------------------------------------------------
def _features(format: str, row: dict[str, Any]):
    """Fixed Arrow features, so that rows with and without tool calls share one schema."""
    from datasets import Features, List, Value

    message = {
        "role": Value("string"),
        "content": Value("string"),
        "tool_calls": List(
            {
                "id": Value("string"),
                "type": Value("string"),
                "function": {"name": Value("string"), "arguments": Value("string")},
            }
        ),
        "tool_call_id": Value("string"),
    }

    def col(v: Any):
        return Value("string") if isinstance(v, str) else List(message)

    if format == "sft":
        return Features({"messages": List(message), "tools": Value("string")})
    if format == "preference":
        return Features(
            {
                "prompt": col(row["prompt"]),
                "chosen": col(row["chosen"]),
                "rejected": col(row["rejected"]),
                "score_chosen": Value("float64"),
                "score_rejected": Value("float64"),
            }
        )
    if format == "kto":
        return Features(
            {"prompt": col(row["prompt"]), "completion": col(row["completion"]), "label": Value("bool")}
        )
    return Features({"prompt": col(row["prompt"])})


def _shape(row: dict[str, Any], features) -> str | None:
    """None if the row fits the features chosen from the first row (text vs messages), else the column."""
    from datasets import Value

    for k, f in features.items():
        if (
            isinstance(f, Value)
            and f.dtype == "string"
            and row.get(k) is not None
            and not isinstance(row[k], str)
        ):
            return k
        if not isinstance(f, Value) and isinstance(row.get(k), str):
            return k
    return None


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
    test_fraction: float = 0.1,
    seed: int = 0,
    progress: bool = False,
    overwrite: bool = True,
) -> dict[str, Any]:
    """Convert a store's traces into a ``datasets`` folder at ``out`` (see the module docstring);
    returns the card as a dict."""
    import datasets
    from datasets import Dataset, DatasetDict

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
            "test_fraction": test_fraction,
            "seed": seed,
        },
    )
    maker = RowMaker(format, score, margin, label_threshold, text, card)
    deduper = Deduper(exact=exact_dup, near=near_dup)
    redactor = redact if isinstance(redact, Redactor) else None
    if redactor is not None:
        redactor = Redactor([(label, r.pattern) for label, r in redactor.rules])  # its own count
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=src.count(query), unit="rec", desc=f"to-dataset {format}", mininterval=0.5)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        spills = {name: open(tmp / f"{name}.jsonl", "w", encoding="utf-8") for name in ("train", "test")}
        counts = {"train": 0, "test": 0}
        features = None
        try:
            for group in src.traces(query):
                card.records += len(group)
                card.traces += 1
                if bar is not None:
                    bar.update(len(group))
                index = TraceIndex(group)
                calls = []
                for r in group:
                    if r.kind not in filters.kinds:
                        continue  # not a candidate (tool calls, agent roots): no rule counts it
                    rule = filters.check(r, index)
                    if rule is None:
                        calls.append(r)
                    else:
                        card.drop(rule)
                for r, row in maker.rows(calls, index):
                    card.candidates += 1
                    line = json.dumps(row, ensure_ascii=False)
                    if redactor is not None:
                        if redactor.needed(line):
                            row = redactor.value(row)
                            line = json.dumps(row, ensure_ascii=False)
                    elif redact is not None:
                        row = redact(row)
                        line = json.dumps(row, ensure_ascii=False)
                    rule = deduper.check(row, line)
                    if rule is not None:
                        card.drop(rule)
                        continue
                    if features is None:
                        features = _features(format, row)
                    bad = _shape(row, features)
                    if bad is not None:
                        card.drop(f"mixed_{bad}_shape")
                        continue
                    split = "test" if _test_side(r.session_id or r.trace_id, test_fraction, seed) else "train"
                    spills[split].write(line + "\n")
                    counts[split] += 1
        finally:
            for f in spills.values():
                f.close()
            if bar is not None:
                bar.close()
            if owns:
                src.close()
        card.redactions = redactor.count if redactor is not None else 0
        if not counts["train"] and not counts["test"]:
            raise TraceError(_empty_message(card, filters))
        splits = {}
        if not progress:
            datasets.disable_progress_bars()
        for name, n in counts.items():
            if n:  # pyarrow's JSON reader, in blocks, into datasets' Arrow cache: bounded memory
                splits[name] = Dataset.from_json(
                    str(tmp / f"{name}.jsonl"), features=features, cache_dir=str(tmp / "cache")
                )
        dd = DatasetDict(splits)
        dd.save_to_disk(str(tmp / "dataset"))
        if not progress:
            datasets.enable_progress_bars()
        card.splits = {k: len(v) for k, v in dd.items()}
        card.seconds = time.perf_counter() - start
        (tmp / "dataset" / "card.json").write_text(json.dumps(card.to_dict(), indent=2) + "\n")
        (tmp / "dataset" / "README.md").write_text(card.markdown())
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp / "dataset", out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp / "dataset", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return card.to_dict()


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
