"""``lookup_calculator``: a task that needs two tool calls in sequence, a look-up, then a sum.

The task of the ``lookup_tools`` source (``toolbox/data/sources/lookup_tools.py``), whose world it
plays: made from a record's ``expression`` ``a<op>b`` and ``answer`` (a ``lookup_tools`` or an
``arithmetic_tools`` record), the first operand is hidden in an inventory the model reads with the
``lookup`` tool, the second is in the question::

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

from typing import Any

from toolbox.core.registries import TEXT_ENVS
from toolbox.data.sources.arithmetic_tools import calculate, call_expression, final_answer
from toolbox.data.sources.lookup_tools import LOOKUP, TOOLS, lookup_reply, world
from toolbox.rl.tool_env import ToolEnv

__all__ = ["LOOKUP", "LookupCalculatorEnv"]


@TEXT_ENVS.register("lookup_calculator")
class LookupCalculatorEnv(ToolEnv):
    """Look a number up with one tool, compute with another (see the module docstring).

    Args:
        max_turns: the most replies of the model in an episode.
        max_tokens: the most tokens of an episode after its opening prompt.
    """

    score_names = ("correct", "looked_up", "computed")

    def __init__(self, max_turns: int = 4, max_tokens: int = 384) -> None:
        super().__init__(max_turns=max_turns, max_tokens=max_tokens)
        self.inventory: dict[str, int] = {}
        self.item = ""

    def opening(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        w = world(str(task.get("expression", "")))
        self.item, self.inventory = w.item, dict(w.inventory)
        return [{"role": "user", "content": w.question}]

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def run_tool(self, name: str, arguments: str) -> str:
        if name == "calculator":
            return calculate(call_expression(arguments))
        if name != "lookup":
            return f"error: unknown tool {name!r}, the tools are lookup and calculator"
        return lookup_reply(self.inventory, arguments)

    def score_answer(self, content: str) -> tuple[float, dict[str, Any]]:
        answer = str(self.task["answer"])
        correct = final_answer(content) == answer
        hidden = str(self.inventory[self.item])
        looked_up = any(r.name == "lookup" and r.result == hidden for r in self.runs)
        computed = any(r.name == "calculator" and r.result == answer for r in self.runs)
        return float(correct), {"correct": correct, "looked_up": looked_up, "computed": computed}
