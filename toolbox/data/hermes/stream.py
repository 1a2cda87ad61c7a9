"""Hermes tool calls parsed as they are generated, for streamed chat responses (what vLLM's
``--tool-call-parser hermes`` streams): text outside ``<tool_call>`` blocks is content; in a block,
a call's ``name`` is sent once it is written whole (with the call's index and a new id), then its
``arguments`` as fragments, character by character as the model writes them.

The arguments text is the model's own JSON with the whitespace outside strings dropped, the same
text the whole-response parser returns (``tool_calls.parse`` takes its ``arguments`` from this
scanner), so the concatenated fragments equal the non-streamed call's ``arguments``.

Content is sent as it comes, except a tail that may be the start of ``<tool_call>`` (held until it
is not), whitespace before the first content, and whitespace that may turn out to be trailing: the
concatenated content equals the whole-response parser's (stripped) content. A block that ends
before a name was written (its JSON broken, or cut by ``max_tokens``) is sent as content, as the
whole-response parser leaves it; once a call's name is sent it cannot be taken back, so a call
whose JSON breaks after that stays a call with the arguments sent so far (as in vLLM).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_ARGUMENT_KEYS = ("arguments", "parameters")


@dataclass
class CallDelta:
    """One piece of a streamed call: its header (``name`` and ``id`` set) or an ``arguments`` fragment."""

    index: int
    name: str | None = None
    id: str | None = None
    arguments: str = ""


@dataclass
class _Block:
    """The JSON object of the ``<tool_call>`` block being read, scanned a character at a time."""

    raw: str = ""
    depth: int = 0
    in_string: bool = False
    escape: bool = False
    key: str | None = None  # the top-level key whose value is being read
    expect_key: bool = True  # at depth 1: a key comes next (else a value)
    token: str = ""  # the top-level string being read (a key, or the name's value)
    value_depth: int | None = None  # depth at which the arguments value started (streaming it)
    args: list[str] = field(default_factory=list)  # arguments text not yet sent
    args_seen: bool = False
    name: str | None = None
    done: bool = False  # the object closed

    def push(self, ch: str) -> None:
        self.raw += ch
        if self.done:
            return
        streaming = self.value_depth is not None
        if self.in_string:
            if streaming:
                self.args.append(ch)
            elif self.depth == 1:
                self.token += ch
            if self.escape:
                self.escape = False
            elif ch == "\\":
                self.escape = True
            elif ch == '"':
                self.in_string = False
                if self.depth == 1 and not streaming:
                    self._top_string_done()
                if streaming and self.depth == self.value_depth:  # a string value ended
                    self.value_depth = None
            return
        if ch.isspace():
            return
        if self.depth == 1 and not self.expect_key and self.key in _ARGUMENT_KEYS and not self.args_seen:
            if ch not in ",}":  # the arguments value starts
                self.args_seen = True
                self.value_depth = 1
                streaming = True
        if streaming and self.depth == self.value_depth and ch in ",}":  # a scalar value ended
            self.value_depth = streaming = None  # type: ignore[assignment]
        if streaming:
            self.args.append(ch)
        if ch == '"':
            self.in_string = True
            if self.depth == 1 and not streaming:
                self.token = ch
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if streaming and self.depth == self.value_depth:
                self.value_depth = None
            if self.depth == 0:
                self.done = True
        elif self.depth == 1 and ch == ":":
            self.expect_key = False
        elif self.depth == 1 and ch == ",":
            self.expect_key, self.key = True, None

    def _top_string_done(self) -> None:
        try:
            text = json.loads(self.token)
        except ValueError:
            return
        if self.expect_key:
            self.key = text
        elif self.key == "name" and self.name is None and isinstance(text, str):
            self.name = text


class ToolCallStream:
    """Feed a choice's text as it is generated; get content and ``CallDelta`` pieces back."""

    def __init__(self) -> None:
        self._pending = ""  # text not yet classified (a possible tag start, or whitespace)
        self._block: _Block | None = None
        self._after_block = False  # the object closed; waiting for </tool_call>
        self._content_started = False
        self._held_ws = ""  # whitespace after the content sent so far: sent once more content follows
        self.calls = 0  # calls whose header was sent
        self._header_sent = False

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        """The content and call pieces ``text`` completes; ``final``: the choice ended."""
        content: list[str] = []
        deltas: list[CallDelta] = []
        self._pending += text
        while self._pending:
            if self._block is None:
                if not self._take_content(content, final):
                    break
            elif not self._take_block(content, deltas):
                break
        if final:
            if self._block is not None:  # cut inside a block
                if not self._header_sent:
                    self._emit_content(OPEN + self._block.raw + self._pending, content)
                self._block = None
            else:
                self._emit_content(self._pending, content)
            self._pending = ""
        return "".join(content), deltas

    # outside a block ---------------------------------------------------------------------------------
    def _take_content(self, content: list[str], final: bool) -> bool:
        pending = self._pending
        at = pending.find(OPEN)
        if at >= 0:
            self._emit_content(pending[:at], content)
            self._pending = pending[at + len(OPEN) :]
            self._block, self._header_sent, self._after_block = _Block(), False, False
            return True
        if final:
            return False  # feed sends the rest
        cut = len(pending) - _tag_prefix_len(pending)  # a tail that may still become <tool_call> waits
        self._emit_content(pending[:cut], content)
        self._pending = pending[cut:]
        return False

    def _emit_content(self, text: str, content: list[str]) -> None:
        """Send ``text`` as content, but for leading whitespace (dropped) and trailing whitespace
        (held until more content follows; dropped at the end, as the whole parser strips)."""
        if not self._content_started:
            text = text.lstrip()
        if not text:
            return
        text = self._held_ws + text
        body = text.rstrip()
        self._held_ws = text[len(body) :]
        if body:
            content.append(body)
            self._content_started = True

    # inside a block ----------------------------------------------------------------------------------
    def _take_block(self, content: list[str], deltas: list[CallDelta]) -> bool:
        block = self._block
        assert block is not None
        if self._after_block:
            stripped = self._pending.lstrip()
            block.raw += self._pending[: len(self._pending) - len(stripped)]
            self._pending = stripped
            if stripped.startswith(CLOSE):
                self._pending = stripped[len(CLOSE) :]
                self._close(content, deltas)
                return True
            if CLOSE.startswith(stripped):
                return False  # may still be </tool_call>
            self._abandon(content)  # text after the object that is not the closing tag
            return True
        for i, ch in enumerate(self._pending):
            block.push(ch)
            if block.name is not None and not self._header_sent:
                deltas.append(CallDelta(self.calls, block.name, f"call_{uuid.uuid4().hex[:24]}"))
                self._header_sent = True
                self.calls += 1
            if self._header_sent and block.args:
                self._append_args(deltas, "".join(block.args))
                block.args.clear()
            if block.done:
                self._pending = self._pending[i + 1 :]
                self._after_block = True
                return True
            if not block.in_string and block.depth == 0 and not ch.isspace() and ch != "{":
                self._pending = self._pending[i + 1 :]
                self._abandon(content)  # not a JSON object
                return True
        self._pending = ""
        return False

    def _append_args(self, deltas: list[CallDelta], text: str) -> None:
        index = self.calls - 1
        if deltas and deltas[-1].index == index:
            deltas[-1].arguments += text
        else:
            deltas.append(CallDelta(index, arguments=text))

    def _close(self, content: list[str], deltas: list[CallDelta]) -> None:
        block = self._block
        assert block is not None
        self._block = None
        if not self._header_sent:  # no name: the block stays text
            self._emit_content(OPEN + block.raw + CLOSE, content)
            return
        if not block.args_seen:
            self._append_args(deltas, "{}")  # as the whole-response parser: no arguments is {}

    def _abandon(self, content: list[str]) -> None:
        """The block is not a call: its text so far is content (once no header went out)."""
        block = self._block
        assert block is not None
        self._block = None
        if not self._header_sent:
            self._emit_content(OPEN + block.raw, content)


def scan_arguments(call_json: str) -> str:
    """The ``arguments`` (or ``parameters``) text of a call's JSON object as the stream sends it:
    the model's JSON without the whitespace outside strings (``{}`` when absent)."""
    block = _Block()
    for ch in call_json:
        block.push(ch)
    return "".join(block.args) if block.args_seen else "{}"


def _tag_prefix_len(text: str) -> int:
    """The length of the longest tail of ``text`` that is a proper prefix of ``<tool_call>``."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0
