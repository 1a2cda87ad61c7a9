"""``lookup_calculator``: a task that needs two tool calls in sequence, a look-up, then a sum.

Made from an ``arithmetic_tools`` record (``expression`` ``a<op>b``, ``answer``): the first operand
is hidden in an inventory the model reads with the ``lookup`` tool, the second is in the question::

    user: How many pens does the store have after it gets 17 more? first find the pens in the
          inventory.
    assistant -> lookup({"item": "pens"})            tool: 45
    assistant -> calculator({"expression": "45+17"}) tool: 62
    assistant: The answer is 62.

The inventory holds the asked item and three others (their counts derived from the task, so an
episode is deterministic); ``lookup`` of an item not in it answers an error naming the items.
Reward 1.0 when the final answer's last integer is the record's answer. Scores: ``correct``,
``looked_up`` (a lookup returned the hidden operand), ``computed`` (a calculator call returned
the answer).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from toolbox.core.errors import DataError
from toolbox.core.registries import TEXT_ENVS
from toolbox.data.sources.arithmetic_tools import TOOLS, calculate, call_expression, final_answer
from toolbox.rl.tool_env import ToolEnv

ITEMS = ("apples", "pens", "marbles", "coins", "books", "cups", "boxes", "chairs")
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "how many of an item the store has",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    },
}
QUESTIONS = {
    "+": "How many {item} does the store have after it gets {b} more?",
    "-": "How many {item} does the store have after it sells {b}?",
    "*": "The store packs each of its {item} with {b} labels. How many labels does it need?",
}
_EXPRESSION = re.compile(r"^(\d+)([-+*])(\d+)$")


@TEXT_ENVS.register("lookup_calculator")
class LookupCalculatorEnv(ToolEnv):
    """Look a number up with one tool, compute with another (see the module docstring).

    Args:
        max_turns: the most replies of the model in an episode.
        max_tokens: the most tokens of an episode after its opening prompt.
    """

    def __init__(self, max_turns: int = 4, max_tokens: int = 384) -> None:
        super().__init__(max_turns=max_turns, max_tokens=max_tokens)
        self.inventory: dict[str, int] = {}
        self.item = ""

    def opening(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        match = _EXPRESSION.match(str(task.get("expression", "")))
        if match is None:
            raise DataError(
                f"text_env lookup_calculator: the task needs an 'expression' a<op>b of two non-negative "
                f"integers (an arithmetic_tools record); got {task.get('expression')!r}."
            )
        a, op, b = int(match[1]), match[2], int(match[3])
        h = zlib.crc32(str(task["expression"]).encode())
        self.item = ITEMS[h % len(ITEMS)]
        others = [ITEMS[(h + k) % len(ITEMS)] for k in (1, 3, 5)]
        self.inventory = {self.item: a, **{o: 10 + (h >> (4 * k)) % 90 for k, o in enumerate(others)}}
        question = QUESTIONS[op].format(item=self.item, b=b)
        # (only characters of the arithmetic_tools corpus, which a char tokenizer of the run knows)
        return [{"role": "user", "content": f"{question} first find the {self.item} in the inventory."}]

    def tools(self) -> list[dict[str, Any]]:
        return [LOOKUP, *TOOLS]

    def run_tool(self, name: str, arguments: str) -> str:
        if name == "calculator":
            return calculate(call_expression(arguments))
        if name != "lookup":
            return f"error: unknown tool {name!r}, the tools are lookup and calculator"
        try:
            item = str(json.loads(arguments).get("item", ""))
        except (ValueError, TypeError, AttributeError):
            item = ""
        if item not in self.inventory:
            return f"error: no item {item!r}, the inventory has {' '.join(sorted(self.inventory))}"
        return str(self.inventory[item])

    def score_answer(self, content: str) -> tuple[float, dict[str, Any]]:
        answer = str(self.task["answer"])
        correct = final_answer(content) == answer
        hidden = str(self.inventory[self.item])
        looked_up = any(r.name == "lookup" and r.result == hidden for r in self.runs)
        computed = any(r.name == "calculator" and r.result == answer for r in self.runs)
        return float(correct), {"correct": correct, "looked_up": looked_up, "computed": computed}
