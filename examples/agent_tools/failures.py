"""Why the agent's calculator calls fail: each run's first model call in a trace store, classified
against the problem its question states, per question template (operator).

    python examples/agent_tools/failures.py work/agent_base/traces.sqlite \
        --label "base, training runs (temperature 1.0)" [--into examples/agent_tools/README.md --block agent-failures]

Give several stores (``--label`` once per store) for one table each. A first call is
``right`` (the question's operands and operator, in order), or wrong in exactly one of these ways:
one operand's ``units`` digit, one operand's ``tens`` digit, one operand's two digits, ``both``
operands, the operands ``swapped``, another ``operator``, an expression that is not ``a<op>b``
(``malformed``), or ``no call`` (a reply with no parsed tool call, e.g. broken ``<tool_call>``
markup). ``answer right`` is the run's verifiable reward ``correct``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

KINDS = ("units", "tens", "two digits", "both", "swapped", "operator", "malformed", "no call")


def _template_patterns() -> list[tuple[re.Pattern, str]]:
    from toolbox.data.sources.arithmetic_tools import TEMPLATES

    out = []
    for question, op in TEMPLATES:
        pattern = re.escape(question).replace(r"\{a\}", r"(\d+)").replace(r"\{b\}", r"(\d+)")
        out.append((re.compile(pattern + "$"), op))
    return out


def kind_of(call_expression: str | None, a: int, b: int, op: str) -> str:
    """``right`` or the way the first call is wrong (see the module docstring)."""
    if call_expression is None:
        return "no call"
    m = re.fullmatch(r"\s*(\d+)\s*([-+*])\s*(\d+)\s*", call_expression)
    if not m:
        return "malformed"
    x, got_op, y = int(m[1]), m[2], int(m[3])
    if got_op != op:
        return "operator"
    if (x, y) == (a, b):
        return "right"
    if (x, y) == (b, a):
        return "swapped"
    if x != a and y != b:
        return "both"
    wrong, want = (x, a) if x != a else (y, b)
    if wrong // 10 == want // 10:
        return "units"
    return "tens" if wrong % 10 == want % 10 else "two digits"


def classify(store_path: str) -> dict[str, Counter]:
    """Per operator: runs, ``right`` calls, ``answer`` right, and each kind of wrong first call."""
    from toolbox.tracing import open_store

    patterns = _template_patterns()
    table: dict[str, Counter] = {}
    with open_store(store_path, readonly=True, create=False) as store:
        for records in store.traces():
            run = next((r for r in records if r.kind == "agent"), None)
            calls = sorted((r for r in records if r.kind == "llm_call"), key=lambda r: r.start_time)
            if run is None or not calls:
                continue
            question = (run.inputs or {}).get("question", "")
            found = [(m, op) for p, op in patterns if (m := p.match(question))]
            if not found:
                continue
            ((m, op),) = found
            a, b = int(m[1]), int(m[2])
            expression = None
            for message in calls[0].outputs or []:
                for part in message.get("parts", []):
                    if part.get("type") == "tool_call":
                        args = part.get("arguments")
                        if isinstance(args, str):
                            try:
                                args = json.loads(args)
                            except ValueError:
                                args = {}
                        expression = (
                            str((args or {}).get("expression", "")) if expression is None else expression
                        )
            c = table.setdefault(op, Counter())
            c["runs"] += 1
            c[kind_of(expression, a, b, op)] += 1
            correct = run.score("correct")
            c["answer"] += bool(correct is not None and correct.value)
    return table


def markdown(label: str, table: dict[str, Counter]):
    from toolbox.results.report import Table

    t = Table(label, ["operator", "runs", "call right", "answer right", *KINDS])
    total = Counter()
    for op in sorted(table):
        total.update(table[op])
    for name, c in [*((op, table[op]) for op in sorted(table)), ("all", total)]:
        n = max(c["runs"], 1)
        t.rows.append([name, str(c["runs"]), f"{c['right'] / n:.3f}", f"{c['answer'] / n:.3f}",
                       *(str(c[k]) for k in KINDS)])  # fmt: skip
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stores", nargs="+", help="trace stores of agent runs (agent.py --traces / --eval-traces)")
    p.add_argument("--label", action="append", default=[], help="a title per store")
    p.add_argument("--into", help="replace the block --block of this Markdown file with the tables")
    p.add_argument("--block", default="agent-failures")
    a = p.parse_args(argv)
    if len(a.label) > len(a.stores):
        p.error(f"{len(a.label)} --label for {len(a.stores)} stores; give at most one per store")
    labels = a.label + a.stores[len(a.label) :]
    text = "\n".join(
        markdown(label, classify(s)).markdown() for label, s in zip(labels, a.stores, strict=True)
    )
    if a.into:
        from toolbox.core.atomic import atomic_write_text
        from toolbox.results.report import replace_block

        into = Path(a.into)
        atomic_write_text(into, replace_block(into.read_text(), a.block, text, str(into)))
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
