"""Training rows out of one trace's model calls, in TRL's formats (``toolbox.tracing.dataset`` runs
this over a store; its docstring describes each format).

``RowMaker.rows(calls, index)`` yields ``(record, row)``: the record decides the row's split (its
session) and ``row`` is a plain dict of JSON values. A call that gives no row is counted through
``drop(rule)``: ``continued_in_later_call``, ``unmatched_tool_call``, ``no_assistant_turn``
(sft), ``unscored``, ``no_sibling``, ``tied_siblings`` (preference, kto).

``complete_calls`` (sft, a template holding ``RESULT``): a row that ends in one tool call whose
reply the trace recorded (a later model call's inputs hold it, by call id) gets that reply and a
final assistant turn, the template with ``RESULT`` replaced by the reply. The turn is written by the
template, not by the model: it teaches using the tool's result where the model's own answer after
it was filtered out (e.g. an agent whose call was right and whose answer was not).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from toolbox.tracing.record import ActionRecord, TraceError, messages_to_chat
from toolbox.tracing.record_filters import TraceIndex

FORMATS = ("sft", "preference", "kto", "prompts")
RESULT = "RESULT"  # where complete_calls puts the tool's reply


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


def final_call_ids(chat: list[dict[str, Any]]) -> list[str]:
    """The ids of the tool calls in the conversation's last message, if it is an assistant's."""
    last = chat[-1] if chat else {}
    return [c.get("id") for c in last.get("tool_calls") or ()] if last.get("role") == "assistant" else []


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
        drop: Callable[[str], None],
        final_calls: bool = False,
        complete_calls: str | None = None,
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
        self.drop = drop  # drop(rule): count a row a rule removed
        if complete_calls is not None and (format != "sft" or RESULT not in complete_calls):
            raise TraceError(
                f"complete_calls {complete_calls!r}: an sft template of the final answer holding "
                f"{RESULT} (where the tool's reply goes), e.g. 'The answer is {RESULT}.'"
            )
        # sft: a row may end in its own tool call (a step's row); completed ones end in the template
        self.final_calls = final_calls or complete_calls is not None
        self.complete_calls = complete_calls

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
            yield from self._sft(calls, index)
        elif self.format == "preference":
            yield from self._preference(calls, index)
        elif self.format == "kto":
            yield from self._kto(calls, index)
        else:
            for r in calls:
                yield r, {"prompt": self._prompt(messages_to_chat(_as_messages(r.inputs, "user")))}

    def _sft(
        self, calls: list[ActionRecord], index: TraceIndex
    ) -> Iterator[tuple[ActionRecord, dict[str, Any]]]:
        inputs = [_as_messages(r.inputs, "user") for r in calls]
        replies = self._replies(index) if self.complete_calls is not None else {}
        for i, r in enumerate(calls):
            messages = inputs[i] + _as_messages(r.outputs, "assistant")
            n = len(messages)
            if any(j != i and len(other) >= n and other[:n] == messages for j, other in enumerate(inputs)):
                self.drop("continued_in_later_call")  # part of a later call's conversation
                continue
            chat = messages_to_chat(messages)
            unmatched = unmatched_tool_calls(chat)
            if unmatched and not (self.final_calls and unmatched == final_call_ids(chat)):
                self.drop("unmatched_tool_call")
                continue
            if unmatched and len(unmatched) == 1 and unmatched[0] in replies:
                reply = replies[unmatched[0]]
                chat = [
                    *chat,
                    {"role": "tool", "tool_call_id": unmatched[0], "content": reply},
                    {"role": "assistant", "content": str(self.complete_calls).replace(RESULT, reply)},
                ]
            if not any(m["role"] == "assistant" for m in chat):
                self.drop("no_assistant_turn")
                continue
            yield r, {"messages": chat, "tools": json.dumps(r.tools, ensure_ascii=False) if r.tools else None}

    @staticmethod
    def _replies(index: TraceIndex) -> dict[str, str]:
        """The tool replies the trace's model calls were given, by call id."""
        replies: dict[str, str] = {}
        for r in index.records:
            if r.kind == "llm_call":
                for m in messages_to_chat(_as_messages(r.inputs, "user")):
                    if m["role"] == "tool" and m.get("tool_call_id"):
                        replies[m["tool_call_id"]] = m["content"]
        return replies

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
                    self.drop("unscored")
                    continue
                scored.append((float(s.value), r))
            if len(scored) < 2:
                self.drop("no_sibling")
                continue
            scored.sort(key=lambda t: t[0])
            (worst, rejected), (best, chosen) = scored[0], scored[-1]
            if best - worst <= self.margin:
                self.drop("tied_siblings")
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
                self.drop("unscored")
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
