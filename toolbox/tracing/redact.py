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


class Redactor:
    """Replace every match of the rules with ``[REDACTED:<label>]`` in a record's text fields.

    Args:
        rules: (label, regex) pairs; the built-in ones by default.
        extra: more (label, regex) pairs added after the built-in ones.
    """

    def __init__(
        self, rules: Iterable[tuple[str, str]] = BUILTIN_RULES, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        self.rules = [(label, re.compile(p)) for label, p in (*rules, *extra)]
        # one alternation finds whether a string needs work at all (most strings do not)
        self._any = re.compile("|".join(f"(?:{r.pattern})" for _, r in self.rules)) if self.rules else None
        self.count = 0

    def text(self, s: str) -> str:
        if self._any is None or not self._any.search(s):
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
