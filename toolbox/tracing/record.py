"""ActionRecord: one thing an agent did (a model call, a tool call, a decision), and its scores.

Every field maps one to one onto the OpenTelemetry GenAI semantic conventions (``gen_ai.*``), so a
record is an OTel span and back (``toolbox.tracing.otel``); what the conventions do not name is
kept under ``toolbox.*`` attributes:

==================  ======================================================================
field               OpenTelemetry
==================  ======================================================================
id                  span id (16 hex digits)
parent_id           parent span id
trace_id            trace id (32 hex digits): one agent run, one GRPO group
session_id          ``gen_ai.conversation.id``
kind                ``gen_ai.operation.name`` (llm_call: chat, tool_call: execute_tool,
                    agent: invoke_agent; the others ``toolbox.kind``); ``operation`` keeps
                    the exact name (text_completion, generate_content, ...)
name                span name (``gen_ai.tool.name`` for a tool call, ``gen_ai.agent.name``
                    for an agent)
inputs / outputs    ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (messages as role +
                    parts: text, tool_call{id, name, arguments}, tool_call_response{id,
                    response}); for a tool call ``gen_ai.tool.call.arguments`` /
                    ``gen_ai.tool.call.result``; other kinds ``toolbox.inputs`` / ``.outputs``
tools               ``gen_ai.tool.definitions`` (the functions offered to the model)
model               ``gen_ai.request.model``
input_tokens        ``gen_ai.usage.input_tokens``
output_tokens       ``gen_ai.usage.output_tokens``
finish_reason       ``gen_ai.response.finish_reasons`` (one)
error               ``error.type`` + span status ERROR with the message
start_time/end_time span start / end (seconds since the epoch here, nanoseconds in OTel);
                    ``latency_s`` is their difference
scores              ``toolbox.scores`` (Langfuse's model: name, value numeric / categorical /
                    boolean, source, comment); added after the fact with ``store.add_score``
tags / metadata     ``toolbox.tags`` / ``toolbox.metadata``
schema_version      ``toolbox.schema_version``
==================  ======================================================================

A message is ``{"role": "user", "parts": [{"type": "text", "content": "..."}]}``; an assistant
message that calls a tool has a part ``{"type": "tool_call", "id": "c1", "name": "calc",
"arguments": {...}}`` and the reply is ``{"role": "tool", "parts": [{"type": "tool_call_response",
"id": "c1", "response": ...}]}``. ``chat_to_messages`` / ``messages_to_chat`` convert to and from the
OpenAI chat format.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import toolbox.core.json_codec as codec
from toolbox.core.errors import ToolboxError

SCHEMA_VERSION = 1
KINDS = ("llm_call", "tool_call", "agent", "decision", "env_step", "custom")
# gen_ai.operation.name for each kind (the GenAiOperationNameValues of the semantic conventions)
OPERATION_OF_KIND = {"llm_call": "chat", "tool_call": "execute_tool", "agent": "invoke_agent"}
KIND_OF_OPERATION = {
    "chat": "llm_call",
    "text_completion": "llm_call",
    "generate_content": "llm_call",
    "embeddings": "llm_call",
    "execute_tool": "tool_call",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "invoke_workflow": "agent",
}
SCORE_TYPES = ("NUMERIC", "CATEGORICAL", "BOOLEAN")

_rng = random.Random()  # ids: random, as OTel's RandomIdGenerator


def new_span_id() -> str:
    return f"{_rng.getrandbits(64):016x}"


def new_trace_id() -> str:
    return f"{_rng.getrandbits(128):032x}"


class TraceError(ToolboxError):
    """A trace store or record problem; the message names the file or record and the fix."""


class SerializationError(TraceError):
    """A record holds a value that JSON cannot represent."""


@dataclass(slots=True)
class Score:
    """A named judgement of a record: numeric, categorical (a string) or boolean, with its source.

    Args:
        name: what is scored (``reward``, ``correct``, ``helpfulness``).
        value: a number, a string (categorical) or a bool.
        source: who scored it (``reward`` function, ``eval``, ``annotation``, ``api``).
        data_type: NUMERIC, CATEGORICAL or BOOLEAN (inferred from value when omitted).
        comment: free text.
        timestamp: when it was given (seconds since the epoch).
    """

    name: str
    value: float | str | bool
    source: str = "api"
    data_type: str = ""
    comment: str | None = None
    timestamp: float = 0.0

    def __post_init__(self) -> None:
        if not self.data_type:
            v = self.value
            self.data_type = (
                "BOOLEAN" if isinstance(v, bool) else "CATEGORICAL" if isinstance(v, str) else "NUMERIC"
            )
        if self.data_type not in SCORE_TYPES:
            raise TraceError(
                f"score {self.name!r}: data_type {self.data_type!r}; choose one of {SCORE_TYPES}."
            )
        if self.data_type == "NUMERIC" and not isinstance(self.value, bool):
            self.value = float(self.value)
        if not self.timestamp:
            self.timestamp = time.time()

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "value": self.value, "source": self.source, "data_type": self.data_type}
        if self.comment is not None:
            d["comment"] = self.comment
        d["timestamp"] = self.timestamp
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Score:
        return cls(
            d["name"], d["value"], d.get("source", "api"), d.get("data_type", ""), d.get("comment"),
            d.get("timestamp", 0.0),
        )  # fmt: skip


@dataclass(slots=True)
class ActionRecord:
    """One action of an agent or trainer; see the module docstring for the OTel mapping."""

    kind: str
    name: str
    id: str = field(default_factory=new_span_id)
    parent_id: str | None = None
    trace_id: str = field(default_factory=new_trace_id)
    session_id: str | None = None
    inputs: Any = None
    outputs: Any = None
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    operation: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    start_time: float = 0.0
    end_time: float | None = None
    scores: list[Score] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def latency_s(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.start_time

    @property
    def operation_name(self) -> str | None:
        """``gen_ai.operation.name``: the exact operation, else the kind's standard one."""
        return self.operation or OPERATION_OF_KIND.get(self.kind)

    def score(self, name: str) -> Score | None:
        """The last score of this name (a later score of one name overrides an earlier one)."""
        for s in reversed(self.scores):
            if s.name == name:
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON types only when the inputs and outputs are)."""
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "trace_id": self.trace_id,
            "session_id": self.session_id,
            "kind": self.kind,
            "name": self.name,
            "operation": self.operation,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "tools": self.tools,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "latency_s": self.latency_s,
            "scores": [s.to_dict() for s in self.scores],
            "tags": list(self.tags),
            "metadata": self.metadata,
            "schema_version": self.schema_version,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "record") -> ActionRecord:
        get = d.get  # a store reads a million of these: positional, in the fields' order
        version = int(get("schema_version", SCHEMA_VERSION))
        if version > SCHEMA_VERSION:
            raise TraceError(
                f"{where}: written with trace schema version {version}, but this toolbox reads up to "
                f"version {SCHEMA_VERSION}; upgrade toolbox (pip install -U toolbox) to read it."
            )
        scores, tags = get("scores"), get("tags")
        return cls(
            d["kind"], d["name"], d["id"], get("parent_id"), d["trace_id"], get("session_id"),
            get("inputs"), get("outputs"), get("tools"), get("model"), get("operation"),
            get("input_tokens"), get("output_tokens"), get("finish_reason"), get("error"),
            get("start_time", 0.0), get("end_time"),
            [Score.from_dict(s) for s in scores] if scores else [], list(tags) if tags else [],
            get("metadata") or {}, version,
        )  # fmt: skip


def dumps(record: ActionRecord) -> str:
    """The record as one line of JSON; a value JSON cannot hold raises SerializationError naming it."""
    return encode(record)


def encode(record: ActionRecord, texts: list[str] | None = None) -> str:
    """``dumps``, and with ``texts`` a list: the strings the redactor would rewrite appended to it
    (``codec``: orjson for plain values, the json module for the rest)."""
    d = record.to_dict()
    if codec.orjson is not None or texts is not None:
        found: list[str] = []
        if codec.scan_record(d, found):
            if texts is not None:
                texts += found
            line = codec.dumps_plain(d)
            if line is not None:
                return line
        elif texts is not None:  # not plain: json decides, and the pre-check reads the whole line
            texts.append(_dumps_json(record, d))
    return _dumps_json(record, d)


def _dumps_json(record: ActionRecord, d: dict[str, Any]) -> str:
    try:
        return codec.dumps_json(d)
    except (TypeError, ValueError) as e:
        path, bad = _unserialisable(d)
        raise SerializationError(
            f"record {record.id} ({record.kind} {record.name!r}): {path} is a {type(bad).__name__}, "
            f"which JSON cannot store ({e}); pass plain str/int/float/bool/list/dict values."
        ) from None


def _unserialisable(value: Any, path: str = "") -> tuple[str, Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path}.{k!r}" if path else repr(k), k
            found = _unserialisable(v, f"{path}.{k}" if path else k)
            if found[0]:
                return found
        return "", None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _unserialisable(v, f"{path}[{i}]")
            if found[0]:
                return found
        return "", None
    if value is None or isinstance(value, str | int | bool):
        return "", None
    if isinstance(value, float):
        return ("", None) if value == value and value not in (float("inf"), float("-inf")) else (path, value)
    return path, value


def make_serialisable(value: Any) -> Any:
    """A copy of ``value`` in which what JSON cannot store is its ``repr`` (reported by the caller)."""
    if isinstance(value, dict):
        return {str(k): make_serialisable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [make_serialisable(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return value
    return repr(value)


# -- messages -------------------------------------------------------------------------------------
def text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def chat_to_messages(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (content, tool_calls, role tool + tool_call_id) as GenAI role + parts."""
    out = []
    for m in chat:
        parts: list[dict[str, Any]] = []
        role = m["role"]
        content = m.get("content")
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": m.get("tool_call_id"), "response": content})
        else:
            if isinstance(content, list):  # OpenAI content parts
                for p in content:
                    if p.get("type") == "text":
                        parts.append({"type": "text", "content": p.get("text", "")})
            elif content:
                parts.append({"type": "text", "content": content})
            for call in m.get("tool_calls") or ():
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                parts.append(
                    {"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "arguments": args}
                )
        message = {"role": role, "parts": parts}
        if m.get("name") and role != "tool":
            message["name"] = m["name"]
        out.append(message)
    return out


def messages_to_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GenAI role + parts as the chat format TRL and OpenAI take: ``content`` (a string),
    ``tool_calls`` ({id, type: function, function: {name, arguments (a JSON string)}}) and
    ``role: tool`` replies with ``tool_call_id``. A tool message with several responses becomes
    one message per response."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        parts = m.get("parts") or []
        if role == "tool" or any(p.get("type") == "tool_call_response" for p in parts):
            for p in parts:
                if p.get("type") == "tool_call_response":
                    response = p.get("response")
                    text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
                    out.append({"role": "tool", "tool_call_id": p.get("id"), "content": text})
            continue
        text = "".join(p.get("content", "") for p in parts if p.get("type") == "text")
        message: dict[str, Any] = {"role": role, "content": text}
        calls = [p for p in parts if p.get("type") == "tool_call"]
        if calls:
            message["tool_calls"] = [
                {
                    "id": p.get("id"),
                    "type": "function",
                    "function": {
                        "name": p.get("name"),
                        "arguments": p["arguments"]
                        if isinstance(p.get("arguments"), str)
                        else json.dumps(p.get("arguments"), ensure_ascii=False),
                    },
                }
                for p in calls
            ]
        out.append(message)
    return out
