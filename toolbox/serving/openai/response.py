"""The one response formatter of ``toolbox serve``: both kinds (completions, chat), both modes (whole,
streamed), driven by the request's ``RequestContext``.

A choice is built from a piece of a completion (token ids, text, log-probs, finish reason): the whole
completion for a JSON response, a ``StreamDelta`` for an SSE chunk. Completions put ``text`` in a
choice, chat a ``message`` (whole) or a ``delta`` (streamed, ``role`` in a choice's first chunk).
With tools (chat), a choice's ``<tool_call>`` blocks become ``tool_calls`` (``toolbox.data.hermes.calls``) and
its ``finish_reason`` ``"tool_calls"``; streamed, the text is parsed as it comes
(``toolbox.data.hermes.stream``): content as content deltas, each call as a delta with its index, id, type and
name, then ``function.arguments`` fragments, as OpenAI and vLLM stream them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolbox.data.hermes import calls as tool_calls
from toolbox.data.hermes.stream import CallDelta, ToolCallStream
from toolbox.serving.engine import RequestOutput, StreamDelta
from toolbox.serving.openai.request import RequestContext


def token_text(tokenizer: Any, token_id: int, as_id: bool = False) -> str:
    """A token's name in a logprobs object: its text, or with ``as_id`` (vLLM's
    ``return_tokens_as_token_ids``) ``"token_id:{id}"``."""
    if as_id:
        return f"token_id:{token_id}"
    try:
        return tokenizer.decode([token_id])
    except Exception:
        return str(token_id)


def _lp(x: float) -> float:
    """A log-prob JSON can carry: -inf (a token the processed logits ruled out) as vLLM's -9999."""
    return max(float(x), -9999.0)


def completion_logprobs(
    tokenizer: Any,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    tops: Sequence[dict[int, float]] | None,
    offset: int,
    as_ids: bool = False,
) -> dict[str, Any]:
    """The completions API's ``logprobs`` object. ``top_logprobs[i]`` maps the text of the ``logprobs``
    most likely tokens (most likely first) and of the chosen token to their log-probs, as OpenAI and
    vLLM do (k or k + 1 entries; only the chosen token with ``logprobs: 0``). With ``as_ids`` every
    token is named ``"token_id:{id}"``, and the text offsets count those names, as vLLM's do."""
    tokens = [token_text(tokenizer, t, as_ids) for t in token_ids]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    top_logprobs = []
    for i, (t, lp) in enumerate(zip(tokens, logprobs, strict=False)):
        entry = {token_text(tokenizer, tid, as_ids): _lp(v) for tid, v in (tops[i] if tops else {}).items()}
        entry.setdefault(t, _lp(lp))
        top_logprobs.append(entry)
    return {
        "tokens": tokens,
        "token_logprobs": [_lp(x) for x in logprobs],
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def chat_logprobs(
    tokenizer: Any,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    tops: Sequence[dict[int, float]] | None,
    as_ids: bool = False,
) -> dict[str, Any]:
    """The chat API's ``logprobs`` object: per token its text, log-prob and bytes, and in
    ``top_logprobs`` the ``top_logprobs`` most likely tokens of that step, most likely first. With
    ``as_ids`` every ``token`` is ``"token_id:{id}"``; as in vLLM, the bytes of a generated token stay
    those of its text, and an alternative's are those of its ``token_id:`` name."""

    def entry(token_id: int, logprob: float, text_bytes: bool) -> dict[str, Any]:
        name = token_text(tokenizer, token_id, as_ids)
        text = token_text(tokenizer, token_id) if text_bytes else name
        return {"token": name, "logprob": _lp(logprob), "bytes": list(text.encode())}

    content = []
    for i, (t, lp) in enumerate(zip(token_ids, logprobs, strict=False)):
        top = [entry(tid, v, False) for tid, v in (tops[i] if tops else {}).items()]
        content.append({**entry(t, lp, True), "top_logprobs": top})
    return {"content": content}


@dataclass
class _Piece:
    index: int  # the choice's index in the response
    prompt: int  # its prompt's index
    token_ids: list[int]
    text: str
    finish_reason: str | None
    logprobs: list[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None
    calls: list[CallDelta] = field(default_factory=list)  # streamed with tools: the call pieces


@dataclass
class _ChoiceState:
    """What a streamed choice has sent so far (and, with tools, holds back)."""

    started: bool = False
    text_offset: int = 0
    held: list[_Piece] = field(default_factory=list)  # tokens whose text the tool parser holds
    parser: ToolCallStream = field(default_factory=ToolCallStream)


def _call_delta(d: CallDelta) -> dict[str, Any]:
    """A streamed ``tool_calls`` entry: the header (index, id, type, name) or an arguments fragment."""
    if d.name is None:
        return {"index": d.index, "function": {"arguments": d.arguments}}
    return {
        "index": d.index,
        "id": d.id,
        "type": "function",
        "function": {"name": d.name, "arguments": d.arguments},
    }


class ResponseFormatter:
    """Builds one request's response: ``whole(outputs)`` or ``chunk(prompt, delta)`` + ``usage_chunk()``."""

    def __init__(self, ctx: RequestContext, tokenizer: Any) -> None:
        self.ctx, self.tokenizer = ctx, tokenizer
        self.n_prompt = sum(len(p) for p in ctx.prompts)
        self.n_completion = 0
        self._choices: dict[int, _ChoiceState] = {}

    # the envelope ----------------------------------------------------------------------------------
    def _object(self, streamed: bool) -> str:
        if self.ctx.chat:
            return "chat.completion.chunk" if streamed else "chat.completion"
        return "text_completion"

    def _envelope(self, choices: list[dict[str, Any]], streamed: bool) -> dict[str, Any]:
        return {
            "id": self.ctx.id,
            "object": self._object(streamed),
            "created": self.ctx.created,
            "model": self.ctx.model,
            "choices": choices,
        }

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.n_prompt,
            "completion_tokens": self.n_completion,
            "total_tokens": self.n_prompt + self.n_completion,
        }

    # a choice --------------------------------------------------------------------------------------
    def _choice(self, piece: _Piece, streamed: bool, state: _ChoiceState) -> dict[str, Any]:
        ctx, params = self.ctx, self.ctx.params
        lp = piece.logprobs if params.logprobs and piece.logprobs is not None else None
        choice: dict[str, Any] = {"index": piece.index}
        if ctx.chat:
            content: str | None = piece.text
            calls: list[dict[str, Any]] = []
            called = False
            if ctx.parse_tool_calls and streamed:
                content = piece.text or None
                calls = [_call_delta(d) for d in piece.calls]
                called = state.parser.calls > 0
            elif ctx.parse_tool_calls:
                content, parsed = tool_calls.parse(piece.text)
                calls = [c.to_openai() for c in parsed]
                called = bool(calls)
                if piece.finish_reason == "length" and content is not None:
                    content = tool_calls.without_cut_call(content)  # a call max_tokens cut is no text
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if streamed and state.started:
                message.pop("role")
            if calls:
                message["tool_calls"] = calls
            choice["delta" if streamed else "message"] = message
            choice["logprobs"] = (
                chat_logprobs(self.tokenizer, piece.token_ids, lp, piece.top_logprobs, ctx.as_ids)
                if lp is not None
                else None
            )
            finish = piece.finish_reason
            # "tool_calls" only for calls that were finished: one cut by max_tokens ends "length"
            choice["finish_reason"] = "tool_calls" if called and finish == "stop" else finish
        else:
            choice["text"] = piece.text
            choice["logprobs"] = (
                completion_logprobs(
                    self.tokenizer, piece.token_ids, lp, piece.top_logprobs, state.text_offset, ctx.as_ids
                )
                if lp is not None
                else None
            )
            choice["finish_reason"] = piece.finish_reason
            if lp is not None:
                state.text_offset += sum(
                    len(token_text(self.tokenizer, t, ctx.as_ids)) for t in piece.token_ids
                )
        if ctx.return_token_ids:
            choice["token_ids"] = list(piece.token_ids)
            if not ctx.chat and not state.started:  # vLLM's: the prompt's ids in a choice's first piece
                choice["prompt_token_ids"] = ctx.prompts[piece.prompt]
        return choice

    # whole -----------------------------------------------------------------------------------------
    def whole(self, outputs: list[RequestOutput]) -> dict[str, Any]:
        choices = []
        n = self.ctx.params.n
        for p, out in enumerate(outputs):
            for i, c in enumerate(out.completions):
                self.n_completion += len(c.token_ids)
                piece = _Piece(
                    p * n + i, p, list(c.token_ids), c.text, c.finish_reason, c.logprobs, c.top_logprobs
                )
                choices.append(self._choice(piece, False, _ChoiceState()))
        response = self._envelope(choices, streamed=False)
        response["usage"] = self.usage()
        if self.ctx.chat and self.ctx.return_token_ids:
            response["prompt_token_ids"] = self.ctx.prompts[0]
        return response

    # streamed --------------------------------------------------------------------------------------
    def chunk(self, p: int, delta: StreamDelta) -> dict[str, Any] | None:
        """The chunk of one delta (None: nothing to send yet)."""
        if delta.finish_reason == "abort":
            return None
        self.n_completion += len(delta.token_ids)
        index = p * self.ctx.params.n + delta.index
        state = self._choices.setdefault(index, _ChoiceState())
        piece = _Piece(
            index,
            p,
            list(delta.token_ids),
            delta.text,
            delta.finish_reason,
            delta.logprobs,
            delta.top_logprobs,
        )
        if self.ctx.parse_tool_calls:  # parse as it comes; tokens that show nothing yet wait
            text, calls = state.parser.feed(delta.text, final=delta.finish_reason is not None)
            state.held.append(piece)
            if not text and not calls and delta.finish_reason is None:
                return None
            piece = _merge_pieces(state.held)
            piece.text, piece.calls = text, calls
            state.held = []
        first = not state.started
        choice = self._choice(piece, True, state)
        state.started = True
        chunk = self._envelope([choice], streamed=True)
        if self.ctx.chat and self.ctx.return_token_ids and first:
            chunk["prompt_token_ids"] = self.ctx.prompts[p]
        if self.ctx.include_usage:
            chunk["usage"] = None
        return chunk

    def usage_chunk(self) -> dict[str, Any]:
        chunk = self._envelope([], streamed=True)
        chunk["usage"] = self.usage()
        return chunk


def _merge_pieces(pieces: list[_Piece]) -> _Piece:
    last = pieces[-1]
    lps = (
        [x for p in pieces for x in (p.logprobs or [])] if any(p.logprobs for p in pieces) else last.logprobs
    )
    tops = (
        [x for p in pieces for x in (p.top_logprobs or [])] if any(p.top_logprobs for p in pieces) else None
    )
    return _Piece(
        last.index,
        last.prompt,
        [t for p in pieces for t in p.token_ids],
        "".join(p.text for p in pieces),
        last.finish_reason,
        lps,
        tops,
    )


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"
