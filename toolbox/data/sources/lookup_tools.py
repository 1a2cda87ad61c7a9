"""Generated problems solved with two tool calls in sequence, a look-up, then a sum, as chat records.

The task of the ``lookup_calculator`` text environment (``toolbox/rl/text_envs/lookup.py``), solved:
made from an ``arithmetic_tools`` problem (``expression`` ``a<op>b``, ``answer``), its first operand
hidden in a store's inventory that the ``lookup`` tool reads, its second in the question::

    user       "How many pens does the store have after it gets 17 more? first find the pens in the
                inventory."
    assistant  tool_calls: lookup({"item": "pens"})
    tool       "45"
    assistant  tool_calls: calculator({"expression": "45+17"})
    tool       "62"
    assistant  "The answer is 62."

The world of a problem (``world``: the asked item, the inventory, the question) is derived from its
expression alone, so an episode is deterministic and the environment opens an ``arithmetic_tools``
record too. The inventory holds the asked item and three others; ``lookup`` of an item not in it
answers an error naming the items (``lookup_reply``).

Records: ``messages`` (the solved conversation above, OpenAI format with ``tool_calls`` and
``role: tool`` replies, which the ``chat`` dataset renders as ``toolbox serve`` and the
environment's episodes do), ``tools`` (both schemas, JSON), ``question`` (the user's message),
``expression``, ``answer``, ``item`` and ``tool_call_text`` (the two calls as a served model writes
them; their characters join the corpus a tokenizer is trained on). The problems are
``arithmetic_tools``' draw with one template per operator (``templates=3``), so the test split is
the calculator task's held-out problems with the same ``digits``, ``fixed_width`` and ``seed``, and
no expression is in both splits.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits
from toolbox.data.sources.arithmetic_tools import TOOLS as CALCULATOR_TOOLS
from toolbox.data.sources.arithmetic_tools import draw

ITEMS = ("apples", "pens", "marbles", "coins", "books", "cups", "boxes", "chairs")
LOOKUP: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "how many of an item the store has",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    },
}
TOOLS: list[dict[str, Any]] = [LOOKUP, *CALCULATOR_TOOLS]
QUESTIONS = {
    "+": "How many {item} does the store have after it gets {b} more?",
    "-": "How many {item} does the store have after it sells {b}?",
    "*": "The store packs each of its {item} with {b} labels. How many labels does it need?",
}
_EXPRESSION = re.compile(r"^(\d+)([-+*])(\d+)$")


@dataclass(frozen=True)
class World:
    """What one problem's episode sees: the asked ``item`` (its count is the hidden operand), the
    store's ``inventory`` (item -> count) and the ``question`` the user asks."""

    item: str
    inventory: dict[str, int]
    question: str


def world(expression: str) -> World:
    """The world of the problem ``a<op>b`` (two non-negative integers): ``a`` is the count of an
    item chosen by the expression's CRC32, three other items get counts 10..99 from it too, and the
    question names the item and ``b``."""
    match = _EXPRESSION.match(str(expression))
    if match is None:
        raise DataError(
            f"lookup_calculator: the task needs an 'expression' a<op>b of two non-negative integers "
            f"(an arithmetic_tools or lookup_tools record); got {expression!r}."
        )
    a, op, b = int(match[1]), match[2], int(match[3])
    h = zlib.crc32(str(expression).encode())
    item = ITEMS[h % len(ITEMS)]
    others = [ITEMS[(h + k) % len(ITEMS)] for k in (1, 3, 5)]
    inventory = {item: a, **{o: 10 + (h >> (4 * k)) % 90 for k, o in enumerate(others)}}
    # (only characters of the arithmetic_tools corpus, which a char tokenizer of that run knows)
    question = f"{QUESTIONS[op].format(item=item, b=b)} first find the {item} in the inventory."
    return World(item, inventory, question)


def lookup_reply(inventory: dict[str, int], arguments: str) -> str:
    """The ``lookup`` tool: the count of the JSON ``arguments``' ``item``, or an error naming the
    items when the inventory has no such item."""
    try:
        item = str(json.loads(arguments).get("item", ""))
    except (ValueError, TypeError, AttributeError):
        item = ""
    if item not in inventory:
        return f"error: no item {item!r}, the inventory has {' '.join(sorted(inventory))}"
    return str(inventory[item])


def conversation(expression: str, answer: str, call_id: str) -> list[dict[str, Any]]:
    """The solved episode of a problem: question, lookup call and reply, calculator call and
    reply, answer (call ids ``<call_id>_0`` and ``<call_id>_1``)."""
    w = world(expression)
    hidden = str(w.inventory[w.item])
    steps = [("lookup", {"item": w.item}, hidden), ("calculator", {"expression": expression}, answer)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": w.question}]
    for k, (name, arguments, reply) in enumerate(steps):
        cid = f"{call_id}_{k}"
        call = {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": reply},
        ]
    messages.append({"role": "assistant", "content": f"The answer is {answer}."})
    return messages


@SOURCES.register("lookup_tools")
def lookup_tools(
    num_train: AtLeastOne = 2000,
    num_test: NonNegativeInt = 200,
    digits: AtLeastOne = 2,
    seed: int = 0,
    fixed_width: bool = True,
) -> Splits:
    """Problems solved with a lookup call, then a calculator call, as chat records {messages, tools,
    question, expression, answer, item, tool_call_text} (see the module docstring).

    Args:
        num_train: training conversations.
        num_test: held-out conversations: the ``lookup_calculator`` environment's held-out tasks
            (no expression in both splits).
        digits: the most digits an operand has.
        seed: seed of the draw (``arithmetic_tools``' draw with one template per operator).
        fixed_width: every operand has exactly ``digits`` digits (10..99 for 2), so the looked-up
            number is always as long and sits at the same distance before the calculator call.
    """
    if digits < 1 or num_train < 1 or num_test < 0:
        raise ConfigError(
            f"data.source: digits={digits}, num_train={num_train}, num_test={num_test}; need >= 1, >= 1 and >= 0."
        )
    train, test = draw(num_train, num_test, digits, seed, fixed_width, templates=3)
    tools = json.dumps(TOOLS)

    from toolbox.data.hermes.calls import render_call

    def record(p: dict[str, Any], i: int) -> Record:
        w = world(p["expression"])
        calls = render_call("lookup", json.dumps({"item": w.item})) + render_call(
            "calculator", json.dumps({"expression": p["expression"]})
        )
        return {
            "messages": conversation(p["expression"], p["answer"], f"call_{i}"),
            "tools": tools,
            "question": w.question,
            "expression": p["expression"],
            "answer": p["answer"],
            "item": w.item,
            "tool_call_text": calls,
        }

    return Splits(
        train=[record(p, i) for i, p in enumerate(train)], test=[record(p, i) for i, p in enumerate(test)]
    )
