"""Declared expectations: what a run must reach (``expect:`` in config/config.yaml), checked against
the metrics its eval stage wrote.

An expectation maps a metric of the eval JSON to a rule::

    expect:
      eval/exact_match: {min: 0.95}                  # at least
      eval/loss: {max: 0.1}                          # at most
      eval/accuracy: {value: 0.93, tolerance: 0.02}  # a paper's number, within a tolerance
      gain/eval/exact_match: {min: 0.1}              # after - before, for a run with init_from

``check`` returns one row per rule (expected, got, passed); ``markdown_table`` renders them as the
table the check stage prints when one fails.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from toolbox.core.errors import ConfigError

RULE_KEYS = ("min", "max", "value", "tolerance")


@dataclass(frozen=True)
class Row:
    """One checked rule: the metric, the rule as text, the value found (None: missing) and the verdict."""

    metric: str
    expected: str
    got: float | None
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(expect: Any, where: str = "expect") -> dict[str, dict[str, float]]:
    """The expectations as {metric: {rule: number}}; anything else is a ConfigError naming the key."""
    if expect is None:
        return {}
    if not isinstance(expect, dict):
        raise ConfigError(
            f"{where}: must map metric names to rules, e.g. {{eval/exact_match: {{min: 0.95}}}}."
        )
    out: dict[str, dict[str, float]] = {}
    for metric, rule in expect.items():
        if not isinstance(rule, dict) or not rule:
            raise ConfigError(f"{where}.{metric}: must be a rule such as {{min: 0.95}}; got {rule!r}.")
        unknown = [k for k in rule if k not in RULE_KEYS]
        if unknown:
            raise ConfigError(f"{where}.{metric}: unknown rule {unknown}; use {', '.join(RULE_KEYS)}.")
        if ("tolerance" in rule) != ("value" in rule):
            raise ConfigError(
                f"{where}.{metric}: 'value' and 'tolerance' go together ({{value: 0.93, tolerance: 0.02}})."
            )
        for key, number in rule.items():
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise ConfigError(f"{where}.{metric}.{key}: must be a finite number; got {number!r}.")
        if rule.get("tolerance", 0) < 0:
            raise ConfigError(f"{where}.{metric}.tolerance: must be >= 0; got {rule['tolerance']}.")
        out[str(metric)] = {k: float(v) for k, v in rule.items()}
    return out


def describe(rule: dict[str, float]) -> str:
    """A rule as a reader writes it: ``>= 0.95``, ``<= 0.1``, ``0.93 ± 0.02``, ``0.5 .. 0.9``."""
    parts = []
    if "value" in rule:
        parts.append(f"{rule['value']:g} ± {rule['tolerance']:g}")
    if "min" in rule and "max" in rule:
        parts.append(f"{rule['min']:g} .. {rule['max']:g}")
    elif "min" in rule:
        parts.append(f">= {rule['min']:g}")
    elif "max" in rule:
        parts.append(f"<= {rule['max']:g}")
    return ", ".join(parts)


def holds(rule: dict[str, float], got: float) -> bool:
    if math.isnan(got):
        return False
    if "min" in rule and got < rule["min"]:
        return False
    if "max" in rule and got > rule["max"]:
        return False
    if "value" in rule and abs(got - rule["value"]) > rule["tolerance"] + 1e-12:
        return False
    return True


def check(metrics: dict[str, Any], expect: Any, where: str = "expect") -> list[Row]:
    """One row per expectation; a metric the eval JSON lacks fails (got None)."""
    rows = []
    for metric, rule in validate(expect, where).items():
        value = metrics.get(metric)
        got = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        rows.append(Row(metric, describe(rule), got, got is not None and holds(rule, got)))
    return rows


def markdown_table(rows: list[Row], run: str | None = None) -> str:
    """| run | metric | expected | got | ok | as Markdown (the run column only when given)."""
    head = (["run"] if run is not None else []) + ["metric", "expected", "got", "ok"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        got = "missing" if r.got is None else f"{r.got:.4g}"
        cells = ([run] if run is not None else []) + [
            r.metric,
            r.expected,
            got,
            "yes" if r.passed else "**NO**",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def flat(metrics: dict, prefix: str = "") -> dict:
    """Nested metrics as one level, keys joined by '/': agent_eval.json's ``{"gain":
    {"answer_accuracy": 0.2}}`` is ``gain/answer_accuracy`` (eval.json is flat already)."""
    out: dict = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out
