"""Incremental detokenization with stop strings, for streaming and for stopping mid-generation.

Decoding a growing list of ids one token at a time must not cut a multi-byte character (byte-level
BPE spreads one over several tokens) nor lose the space a tokenizer adds between words, so text is
decoded from a small window of recent tokens and a piece is released only when it is complete
(the approach of TGI and vLLM). Stop strings are searched in the text as it grows; text that could
still become a stop string is held back from the stream until it is clear that it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def text_decoder(tokenizer: Any) -> Callable[[Sequence[int]], str]:
    """``ids -> tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)``.

    For a transformers fast tokenizer whose ``decode`` is the base class's, that call is the Rust
    tokenizer's ``decode(ids, skip_special_tokens=True)`` after ~3 us of Python argument handling,
    paid twice per streamed token; this returns the Rust call itself then (the same string: checked
    in tests/serving), else the tokenizer's ``decode``.
    """
    try:
        from transformers import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # pragma: no cover - transformers without the class: the plain call
        TokenizersBackend = None  # noqa: N806
    backend = getattr(tokenizer, "_tokenizer", None)
    cls = type(tokenizer)
    if (
        TokenizersBackend is not None
        and isinstance(tokenizer, TokenizersBackend)
        and cls.decode is PreTrainedTokenizerBase.decode
        and cls._decode is TokenizersBackend._decode
        and backend is not None
    ):
        return lambda ids: backend.decode(ids, skip_special_tokens=True)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


class IncrementalText:
    """The text of one completion, grown token by token.

    Args:
        tokenizer: a transformers tokenizer (``decode(ids, skip_special_tokens=True)``).
        stop: strings that end the completion; the text is cut before the first one found.
        decode: ``text_decoder(tokenizer)`` (pass it to share one among many completions).
    """

    def __init__(
        self, tokenizer: Any, stop: Sequence[str] = (), decode: Callable[[Sequence[int]], str] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self._decode = decode or text_decoder(tokenizer)
        self.stop = [s for s in stop if s]
        self.longest_stop = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.text = ""
        self.emitted = 0  # characters of ``text`` already released to the stream
        self.stopped = False
        self.finished = False
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_id: int) -> bool:
        """Add one token; return True when a stop string has just appeared (text is then cut)."""
        self.ids.append(int(token_id))
        return self._advance(final=False)

    def finish(self) -> None:
        """Decode what is still pending (even an incomplete character): the completion is over."""
        if not self.finished:
            self.finished = True
            if not self.stopped:
                self._advance(final=True)

    def _advance(self, final: bool) -> bool:
        prefix = self._decode(self.ids[self._prefix_offset : self._read_offset])
        full = self._decode(self.ids[self._prefix_offset :])
        if len(full) <= len(prefix) or (full.endswith("\ufffd") and not final):
            return False  # an incomplete character: wait for the next token
        start = len(self.text)
        self.text += full[len(prefix) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
        if not self.stop:
            return False
        offset = max(0, start - self.longest_stop + 1)
        cut, found = cut_at_stop(self.text[offset:], self.stop)
        if found:
            self.text = self.text[:offset] + cut
            self.stopped = True
        return self.stopped

    def _held_back(self) -> int:
        """Characters at the end of the text that begin some stop string (not yet safe to send)."""
        for n in range(min(self.longest_stop - 1, len(self.text)), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.stop):
                return n
        return 0

    def take(self, final: bool = False) -> str:
        """The text not yet released that is safe to release (all of it when ``final``)."""
        end = len(self.text) if final or self.stopped else len(self.text) - self._held_back()
        if end <= self.emitted:
            return ""
        piece = self.text[self.emitted : end]
        self.emitted = end
        return piece


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first occurrence of any stop string, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)
