"""``ToolEnv``: a text environment whose model calls tools, then gives a final answer that is scored.

Each reply with ``tool_calls`` is executed call by call (``run_tool``) and answered with one
``role: tool`` message per call (its ``tool_call_id`` the call's); a reply without calls is the
final answer, scored by ``score_answer``. Subclasses say which tools there are (``tools``, OpenAI
schemas), how to run one, and how to score an answer.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from toolbox.rl.text_env import Opening, Step, TextEnv, ToolRun


class ToolEnv(TextEnv):
    """Tools until a reply calls none; that reply is scored (see the module docstring)."""

    def __init__(self, max_turns: int = 4, max_tokens: int = 256) -> None:
        super().__init__(max_turns=max_turns, max_tokens=max_tokens)
        self.task: dict[str, Any] = {}
        self.runs: list[ToolRun] = []

    @abstractmethod
    def opening(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        """The conversation the model answers first."""

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The tools offered (OpenAI ``{"type": "function", "function": {...}}`` dicts)."""

    @abstractmethod
    def run_tool(self, name: str, arguments: str) -> str:
        """A call executed: its reply (an error text for a bad call: the model reads it)."""

    @abstractmethod
    def score_answer(self, content: str) -> tuple[float, dict[str, Any]]:
        """The final answer's reward and named scores."""

    def reset(self, task: dict[str, Any]) -> Opening:
        self.task, self.runs = task, []
        return Opening(self.opening(task), self.tools())

    def step(self, message: dict[str, Any]) -> Step:
        calls = message.get("tool_calls") or []
        if not calls:
            reward, scores = self.score_answer(message.get("content") or "")
            return Step(done=True, reward=reward, scores=scores)
        replies, runs = [], []
        for call in calls:
            fn = call["function"]
            result = self.run_tool(fn["name"], fn["arguments"])
            runs.append(ToolRun(call["id"], fn["name"], fn["arguments"], result))
            replies.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        self.runs += runs
        return Step(messages=replies, tool_runs=runs)
