"""Generated arithmetic word problems solved by calling a calculator tool, as chat records.

Each record is a conversation in the OpenAI chat format TRL's SFTTrainer and ``toolbox serve`` speak,
with the ``tools`` it may call::

    user       "A shop has 412 apples and gets 75 more. How many apples does it have now?"
    assistant  tool_calls: calculator({"expression": "412+75"})
    tool       "487"
    assistant  "The answer is 487."

plus ``question``, ``expression``, ``answer`` and ``tool_call_text`` (the call as a served model
writes it, ``<tool_call>{...}</tool_call>``) (the verifiable reward of examples/agent_tools
compares the last number of the final reply with ``answer``). Operands have up to ``digits``
digits, so a small model cannot do the sum itself: it must call the tool with the right expression
and copy the result. Train and test problems are drawn without replacement from every (template, a,
b), and no expression is in both splits (nor twice in one): a subtraction's operands are ordered
(``a-b`` with ``a >= b``), so (a, b) and (b, a) are one problem, and two templates of one operator
with the same operands ask the same sum.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "a+b, a-b or a*b of two integers",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
_NUMBER = re.compile(r"-?\d+")
# (question with {a} and {b}, operator); the first three use each operator once (``templates=3``)
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("A shop has {a} apples and gets {b} more. How many apples does it have now?", "+"),
    ("A box holds {a} pens. {b} are taken out. How many pens are left?", "-"),
    ("There are {a} bags with {b} marbles in each. How many marbles are there in all?", "*"),
    ("Tom has {a} coins and finds {b} more. How many coins does he have?", "+"),
    ("A train carries {a} people and {b} get off. How many are still on the train?", "-"),
    ("A farm has {a} rows of {b} trees. How many trees does it have?", "*"),
)


def calculate(expression: str) -> str:
    """The calculator tool: ``a<op>b`` with integers and one of + - *; an error text otherwise."""
    text = expression.replace(" ", "")
    for op in "+*-":
        head, sep, tail = text[1:].partition(op)  # text[1:]: a leading minus is a sign
        if sep:
            try:
                a, b = int(text[0] + head), int(tail)
            except ValueError:
                break
            return str(a + b if op == "+" else a - b if op == "-" else a * b)
    return f"error: cannot evaluate {expression!r}; write two integers with + - or *"


def call_expression(arguments: str) -> str:
    """The expression a calculator call asks for: its JSON ``arguments``' ``expression`` (``""``
    when they hold none)."""
    try:
        return str(json.loads(arguments).get("expression", ""))
    except (ValueError, TypeError, AttributeError):
        return ""


def run_call(name: str, arguments: str) -> tuple[str, str]:
    """A model's tool call executed: the expression it asked for (``call_expression``) and the reply
    (the calculator's, or an error text for another tool). A call is right when the reply equals
    the problem's ``answer``; the agent of examples/agent_tools and the ``tool_calls`` evaluator
    both score calls with it."""
    expression = call_expression(arguments)
    return expression, calculate(expression) if name == "calculator" else "error: unknown tool"


def final_answer(text: str) -> str | None:
    """The answer a final reply gives: its last integer (None if it has none); the verifiable reward
    compares it with the problem's ``answer``."""
    numbers = _NUMBER.findall(text or "")
    return numbers[-1] if numbers else None


def problem(index: int, size: int, low: int = 0) -> dict[str, Any]:
    """Problem number ``index`` of the (template, a, b) grid with operands in ``low .. low+size-1``."""
    t, rest = divmod(index, size * size)
    a, b = divmod(rest, size)
    a, b = a + low, b + low
    question, op = TEMPLATES[t]
    if op == "-" and b > a:
        a, b = b, a
    expression = f"{a}{op}{b}"
    return {"question": question.format(a=a, b=b), "expression": expression, "answer": calculate(expression)}


def conversation(p: dict[str, Any], call_id: str, reply: str | None = None) -> list[dict[str, Any]]:
    """The solved conversation of a problem: question, tool call, tool result, answer. With ``reply``
    the tool answers that instead of the problem's answer, and the final turn states it."""
    reply = p["answer"] if reply is None else reply
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": p["expression"]})},
    }
    return [
        {"role": "user", "content": p["question"]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": reply},
        {"role": "assistant", "content": f"The answer is {reply}."},
    ]


def draw(
    num_train: int, num_test: int, digits: int, seed: int, fixed_width: bool = False, templates: int = 0
) -> tuple[list[dict], list[dict]]:
    """Disjoint train and test problems. Problems of distinct expressions are drawn one by one (test
    first; a draw whose expression came before is skipped), so no expression is in both splits, the
    test split depends only on ``seed``, ``digits``, ``fixed_width`` and ``templates`` (not on
    ``num_train``), and the first n test problems are the same for any ``num_test >= n``."""
    low = 10 ** (digits - 1) if fixed_width and digits > 1 else 0
    size = 10**digits - low
    kinds = templates or len(TEMPLATES)
    total = kinds * size * size
    # distinct expressions: size * size per operator, size * (size + 1) / 2 for "-" (a >= b)
    ops = {op for _, op in TEMPLATES[:kinds]}
    distinct = sum(size * (size + 1) // 2 if op == "-" else size * size for op in ops)
    if num_train + num_test > distinct * 3 // 4:
        width = f"{digits}-digit" if fixed_width else f"up to {digits}-digit"
        raise ConfigError(
            f"data.source: {num_train} + {num_test} problems asked, but {kinds} templates with {width} "
            f"operands give only {distinct} distinct expressions (at most three quarters of them are drawn); "
            "lower num_train/num_test or raise digits."
        )
    rng, seen, problems = random.Random(seed), set(), []
    while len(problems) < num_train + num_test:
        p = problem(rng.randrange(total), size, low)
        if p["expression"] not in seen:
            seen.add(p["expression"])
            problems.append(p)
    return problems[num_test:], problems[:num_test]


@SOURCES.register("arithmetic_tools")
def arithmetic_tools(
    num_train: AtLeastOne = 2000,
    num_test: NonNegativeInt = 200,
    digits: AtLeastOne = 3,
    seed: int = 0,
    fixed_width: bool = False,
    templates: NonNegativeInt = 0,
    swapped_replies: float = 0.0,
) -> Splits:
    """Word problems solved with a calculator tool call, as chat records {messages, tools, question,
    expression, answer}.

    Args:
        num_train: training conversations.
        num_test: held-out conversations (no problem in both splits).
        digits: the most digits an operand has.
        seed: seed of the draw.
        fixed_width: every operand has exactly ``digits`` digits (100..999 for 3), so the numbers
            sit at the same places in every question of a template.
        templates: use the first this many question templates (0: all of them).
        swapped_replies: the fraction of training conversations whose calculator reply is the
            answer of another training problem of the same operator, and whose final turn states
            that reply (``tool_reply``; ``answer`` stays the problem's). A model cannot compute
            such a reply from the question, so these teach it to answer with what the tool said
            rather than to do the sum itself (examples/agent_tools: a 2-layer model did the
            additions itself, with carry errors, after calling right). The held-out split is
            never swapped.
    """
    if not 0.0 <= swapped_replies <= 1.0:
        raise ConfigError(f"data.source.swapped_replies: {swapped_replies}; a fraction in 0..1.")
    if digits < 1 or num_train < 1 or num_test < 0 or not 0 <= templates <= len(TEMPLATES):
        raise ConfigError(
            f"data.source: digits={digits}, num_train={num_train}, num_test={num_test}, templates={templates}; "
            f"need >= 1, >= 1, >= 0 and 0..{len(TEMPLATES)}."
        )
    train, test = draw(num_train, num_test, digits, seed, fixed_width, templates)
    tools = json.dumps(TOOLS)

    from toolbox.data.hermes.calls import render_call

    def record(p: dict[str, Any], i: int, reply: str | None = None) -> Record:
        # tool_call_text: the call as the served model writes it (its characters are in the corpus
        # a char tokenizer is built from)
        call = render_call("calculator", json.dumps({"expression": p["expression"]}))
        messages = conversation(p, f"call_{i}", reply)
        extra = {"tool_reply": reply} if reply is not None else {}  # (the training split, when swapping)
        return {"messages": messages, "tools": tools, "tool_call_text": call, **p, **extra}

    replies = swap_replies(train, swapped_replies, seed) if swapped_replies else [None] * len(train)
    return Splits(
        train=[record(p, i, r) for i, (p, r) in enumerate(zip(train, replies, strict=True))],
        test=[record(p, i) for i, p in enumerate(test)],
    )


def swap_replies(problems: list[dict[str, Any]], fraction: float, seed: int) -> list[str | None]:
    """Each problem's calculator reply: its answer, or for ``round(fraction * n)`` of them (drawn with
    their own seeded generator, so the problems themselves do not change) the answer of another
    problem of the same operator."""
    replies: list[str | None] = [p["answer"] for p in problems]
    count = round(fraction * len(problems))
    rng = random.Random(f"swapped_replies:{seed}")
    by_op: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        by_op.setdefault(_op(p["expression"]), []).append(i)
    for i in rng.sample(range(len(problems)), count):
        same = by_op[_op(problems[i]["expression"])]
        other = [j for j in rng.sample(same, min(len(same), 8)) if problems[j]["answer"] != replies[i]]
        if other:
            replies[i] = problems[other[0]]["answer"]
    return replies


def _op(expression: str) -> str:
    """The operator of ``a<op>b`` (operands are non-negative here)."""
    return next(c for c in expression if c in "+-*")
