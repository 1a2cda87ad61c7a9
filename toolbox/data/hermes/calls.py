"""Tool calling in the Hermes format (vLLM's ``--tool-call-parser hermes``): a model calls a tool by
writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

- Prompt: the tools and earlier calls reach the model through its chat template. A template that
  renders ``tools`` / ``tool_calls`` itself (Qwen, Hermes) gets them as they are; for one that does
  not (the templates trained here render only ``content``), the tools become a system message
  ``<tools>[...]</tools>`` and an assistant message's calls its content, in the same format the
  model is asked to answer in.
- Output: ``parse`` cuts every well-formed ``<tool_call>`` block out of the text into OpenAI
  ``tool_calls`` (a block whose JSON does not parse stays text, as vLLM's parser leaves it); a
  call's ``arguments`` are the model's JSON without whitespace outside strings. A streamed
  response parses as it goes (``stream.py``) and sends the same text in fragments.
- ``tool_choice`` "required" or a named function: the server constrains the output
  (``toolbox.serving.structured.forced_tool_call``)
  to exactly one call of an allowed tool whose ``arguments`` match that tool's ``parameters``
  schema; "auto" lets the model choose; "none" neither asks for nor parses calls.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from toolbox.data.hermes.stream import scan_arguments

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: str  # JSON text, as OpenAI returns it

    def to_openai(self) -> dict[str, Any]:
        call: dict[str, Any] = {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return call


def render_call(name: str, arguments: str) -> str:
    """An earlier call as the model writes it (``arguments``: the JSON text of the request)."""
    try:
        args: Any = json.loads(arguments)
    except (TypeError, ValueError):
        args = arguments
    return (
        "<tool_call>" + json.dumps({"name": name, "arguments": args}, separators=(",", ":")) + "</tool_call>"
    )


def parse(text: str) -> tuple[str | None, list[ParsedCall]]:
    """The content left around the calls (None if nothing is) and the calls, in order."""
    calls: list[ParsedCall] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except ValueError:
            continue
        if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)):
            continue
        kept.append(text[pos : match.start()])
        pos = match.end()
        calls.append(ParsedCall(obj["name"], scan_arguments(match.group(1))))
    kept.append(text[pos:])
    if not calls:
        return text, calls
    return ("".join(kept).strip() or None), calls


def without_cut_call(content: str) -> str | None:
    """``content`` without a last ``<tool_call>`` block that never closed (max_tokens cut it: it is
    neither a call nor text the model meant); None if nothing is left."""
    start = content.rfind("<tool_call>")
    if start < 0 or "</tool_call>" in content[start:]:
        return content
    return content[:start].strip() or None


def template_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages (and ``tools=`` argument) to render with ``template``: passed through where the
    template renders tools / tool calls itself, else written into the messages in Hermes form."""
    renders_tools = "tools" in template
    renders_calls = "tool_calls" in template
    out = []
    for m in messages:
        m = dict(m)
        calls = m.get("tool_calls")
        if calls and not renders_calls:
            text = "".join(render_call(c["function"]["name"], c["function"]["arguments"]) for c in calls)
            m["content"] = (m.get("content") or "") + text
            m.pop("tool_calls")
        out.append(m)
    if tools and not renders_tools:
        listing = "<tools>" + json.dumps([t["function"] for t in tools], separators=(",", ":")) + "</tools>"
        out.insert(0, {"role": "system", "content": listing})
        return out, None
    return out, tools
