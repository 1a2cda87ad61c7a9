"""Redaction: secrets and personal data replaced before a record is stored, and again at conversion.

``Redactor`` is a list of (label, regex) rules; every string inside a record's inputs, outputs,
tools, error and metadata is rewritten, a match becoming ``[REDACTED:<label>]``. The built-in
rules find API keys (OpenAI ``sk-``, Anthropic, AWS access key ids, GitHub, Slack, Hugging Face,
Google), ``Bearer`` tokens and ``Authorization`` headers, ``key=value`` secrets (api_key,
password, token, secret), e-mail addresses and phone numbers. A phone number needs the shape of
one (a leading ``+`` country code, or digit groups split by spaces, dots, dashes or parentheses):
a bare run of digits is left alone, because numbers are the content of arithmetic tasks.

Any callable ``record -> record | None`` can be the tracer's hook instead (None drops the record).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from toolbox.tracing.record import ActionRecord

BUILTIN_RULES: tuple[tuple[str, str], ...] = (
    ("bearer", r"(?i:\bbearer)\s+[A-Za-z0-9._~+/=-]{8,}"),
    ("api_key", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"),
    ("api_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("api_key", r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    ("api_key", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    ("api_key", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("api_key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    (
        "secret",
        r"(?i:\b(?:api[_-]?key|secret|token|password|passwd|authorization)\b)(\s*[:=]\s*)"
        r"(?:\"[^\"]{4,}\"|'[^']{4,}'|[^\s,;\"']{4,})",
    ),
    ("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    ("phone", r"(?<![\w+])\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]?\d{2,4}){1,4}(?!\w)"),
    ("phone", r"(?<![\w+])(?:\(\d{2,4}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?!\w)"),
)
_SEPARATORS = (" ", ".", "-")
_PHONE_SHAPES = tuple(f"000{a}000{b}0000".encode() for a in _SEPARATORS for b in _SEPARATORS) + (
    b")000",
    b") 000",
)
_PHONE_HINTS = (b"000 000", b"000-000", b"000.000.", b"000.000 ", b"000.000-", b")")
# digits to 0 and every whitespace (\s) to a space, so that the shapes above cover each phone rule
_ASCII_SPACES = bytes(c for c in range(128) if chr(c).isspace())
_ZERO_ASCII = bytes.maketrans(b"123456789" + _ASCII_SPACES, b"0" * 9 + b" " * len(_ASCII_SPACES))


@functools.cache
def _zero_unicode() -> dict[int, str]:  # built on first need (a scan of every code point)
    return {
        **{c: "0" for c in range(0x110000) if chr(c).isdecimal()},  # \d: every Unicode decimal digit
        **{c: " " for c in range(0x110000) if chr(c).isspace()},
    }


_NON_ASCII_DIGIT_OR_SPACE = re.compile(r"(?:(?![\x00-\x7f])[\d\s])")
# the letters re's IGNORECASE matches to an ASCII letter of a keyword (and str.lower leaves alone)
_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
_FOLDED = tuple(chr(c) for c in _FOLD)


def might_hold_builtin_secret(text: str) -> bool:
    """False only when no built-in rule can match ``text``: every rule's match contains a literal
    (``@``; ``sk-``, ``xox`` with a ``-``; ``hf_``, ``gh`` with a ``_``; ``AKIA``, ``ASIA``, ``AIza``;
    ``bearer``; a keyword with a ``:`` or ``=``), or a phone's shape (``000-000-0000``, ``(000)``,
    or a ``+0`` after no word character, once digits are zeroed and spaces made one kind). A few
    ``in`` tests on the text (cheap ones first: one character), so the regexes run only on the rare
    text that needs them. The tracer checks a record's strings joined (``Redactor.needed_any``)."""
    if "@" in text:
        return True
    if "-" in text and ("sk-" in text or "xox" in text):
        return True
    if "_" in text and ("hf_" in text or "gh" in text):
        return True
    if "A" in text and ("AKIA" in text or "ASIA" in text or "AIza" in text):
        return True
    plain = text.isascii()
    low = text.lower() if plain or not any(c in text for c in _FOLDED) else text.translate(_FOLD).lower()
    if "bearer" in low:
        return True
    if ("=" in text or ":" in text) and (
        "secret" in low or "token" in low or "passw" in low or "api" in low or "authorization" in low
    ):
        return True
    if plain:
        zeroed = text.encode().translate(_ZERO_ASCII)  # bytes: a fast table
    elif _NON_ASCII_DIGIT_OR_SPACE.search(text):
        zeroed = text.translate(_zero_unicode()).encode("utf-8", "surrogatepass")
    else:
        zeroed = text.encode("utf-8", "surrogatepass").translate(_ZERO_ASCII)
    # every phone shape holds one of these hints (a float's one dot makes "000.000" but none of them)
    for hint in _PHONE_HINTS:
        if hint in zeroed:
            for shape in _PHONE_SHAPES:
                if shape in zeroed:
                    return True
            break
    i = zeroed.find(b"+0")  # +<country code>, not the plus of a sum (the rule wants no word before)
    while i != -1:
        before = zeroed[i - 1 : i]
        if i == 0 or not (before.isalnum() or before in (b"_", b"+")):
            return True
        i = zeroed.find(b"+0", i + 1)
    return False


class Redactor:
    """Replace every match of the rules with ``[REDACTED:<label>]`` in a record's text fields.

    Args:
        rules: (label, regex) pairs; the built-in ones by default.
        extra: more (label, regex) pairs added after the built-in ones.
    """

    def __init__(
        self, rules: Iterable[tuple[str, str]] = BUILTIN_RULES, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        rules, extra = tuple(rules), tuple(extra)
        self.rules = [(label, re.compile(p)) for label, p in (*rules, *extra)]
        self._builtin_only = not extra and set(rules) <= set(BUILTIN_RULES)
        self.count = 0

    def needed(self, text: str) -> bool:
        """Whether ``text`` (a string, or a whole serialised record) may hold something to redact."""
        return not self._builtin_only or might_hold_builtin_secret(text)

    def needed_any(self, texts: list[str]) -> bool:
        """Whether any of ``texts`` (a record's or a row's strings) may hold something to redact."""
        if not self._builtin_only:
            return True
        return might_hold_builtin_secret(texts[0] if len(texts) == 1 else "\n".join(texts))

    def text(self, s: str) -> str:
        if len(s) < 6 or not self.needed(s):  # shorter than any secret the rules find
            return s
        for label, rule in self.rules:
            if label == "secret":
                s, n = rule.subn(
                    lambda m: m.group(0)[: m.start(1) - m.start(0)] + m.group(1) + "[REDACTED:secret]", s
                )
            else:
                s, n = rule.subn(f"[REDACTED:{label}]", s)
            self.count += n
        return s

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [self.value(x) for x in v]
        return v

    def __call__(self, record: ActionRecord) -> ActionRecord:
        record.inputs = self.value(record.inputs)
        record.outputs = self.value(record.outputs)
        if record.error:
            record.error = self.text(record.error)
        if record.metadata:
            record.metadata = self.value(record.metadata)
        if record.tools:
            record.tools = self.value(record.tools)
        record.name = self.text(record.name)
        return record


default_redactor = Redactor()
