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
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_SEPARATORS = (" ", ".", "-")
_PHONE_SHAPES = tuple(f"000{a}000{b}0000".encode() for a in _SEPARATORS for b in _SEPARATORS) + (
    b")000",
    b") 000",
)
_PHONE_HINTS = (b"000 000", b"000-000", b"000.000.", b"000.000 ", b"000.000-", b")")
_TOKEN_ASSIGN = ("token:", "token=", "token :", "token =")
_LITERALS = ("@", "sk-", "AKIA", "ASIA", "xox", "hf_", "AIza")
_LOWER_LITERALS = ("bearer", "secret", "passw", "authorization", "api_key", "apikey", "api-key")


def might_hold_builtin_secret(text: str) -> bool:
    """False only when no built-in rule can match ``text``: every rule's match contains one of a few
    literals (``@``, ``sk-``, ``bearer``, ``api_key``, ``token:`` / ``token=``, ...; a
    phone number has the shape ``000-000-0000``, or a ``+0`` after no word character, once its
    digits are zeroed). A few ``in``
    tests, so a whole serialised record is checked at once and the regexes run only on the rare
    record that needs them."""
    for lit in _LITERALS:
        if lit in text:
            return True
    if "gh" in text and "_" in text:
        return True
    low = text.lower()
    for lit in _LOWER_LITERALS:
        if lit in low:
            return True
    if "token" in low:
        for lit in _TOKEN_ASSIGN:
            if lit in low:
                return True
    zeroed = text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)  # bytes: a fast table
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
