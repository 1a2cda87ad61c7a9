"""``calculator``: the task of examples/agent_tools as an environment.

A task is a record of the ``arithmetic_tools`` source (``question``, ``answer``). The model reads
the question with the ``calculator`` tool offered, may call it (the source's calculator, as the
agent and the ``tool_calls`` evaluator run it), and its first reply without a call is the answer:
reward 1.0 when its last integer is the record's ``answer``, else 0.0. Scores: ``correct`` (that),
``tool_call_ok`` (the first calculator call returned the answer).
"""

from __future__ import annotations

from typing import Any

from toolbox.core.registries import TEXT_ENVS
from toolbox.data.sources.arithmetic_tools import TOOLS, calculate, call_expression, final_answer
from toolbox.rl.tool_env import ToolEnv


@TEXT_ENVS.register("calculator")
class CalculatorEnv(ToolEnv):
    """An arithmetic word problem solved with a calculator tool (examples/agent_tools' task).

    Args:
        max_turns: the most replies of the model in an episode.
        max_tokens: the most tokens of an episode after its opening prompt.
        question_field: the task field holding the question.
        answer_field: the task field holding the answer.
    """

    score_names = ("correct", "tool_call_ok")

    def __init__(
        self,
        max_turns: int = 3,
        max_tokens: int = 256,
        question_field: str = "question",
        answer_field: str = "answer",
    ) -> None:
        super().__init__(max_turns=max_turns, max_tokens=max_tokens)
        self.question_field = question_field
        self.answer_field = answer_field

    def opening(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": str(task[self.question_field])}]

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def run_tool(self, name: str, arguments: str) -> str:
        if name != "calculator":
            return f"error: unknown tool {name!r}, the tool is calculator"
        return calculate(call_expression(arguments))

    def score_answer(self, content: str) -> tuple[float, dict[str, Any]]:
        answer = str(self.task[self.answer_field])
        correct = final_answer(content) == answer
        first = [r for r in self.runs if r.name == "calculator"][:1]
        return float(correct), {"correct": correct, "tool_call_ok": bool(first) and first[0].result == answer}
