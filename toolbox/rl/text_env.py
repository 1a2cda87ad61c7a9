"""Text environments: the episode API an agent is trained against online (``TEXT_ENVS``).

An environment is one episode of a task. ``reset(task)`` opens it with the conversation the model
answers first and the tools it may call; ``step(message)`` takes the model's reply (an OpenAI
assistant message: ``content`` and, when it called tools, ``tool_calls``) and answers with what
comes next: the tools' replies (``role: tool`` messages) or the next user turn, ``done`` and, once
done, the ``reward``::

    env = TEXT_ENVS.build({"name": "calculator"})
    opening = env.reset({"question": "A shop has 12 apples and gets 30 more. ...", "answer": "42"})
    opening.messages, opening.tools          # [{"role": "user", ...}], [calculator schema]
    step = env.step({"role": "assistant", "content": "", "tool_calls": [...]})
    step.messages, step.done                 # [{"role": "tool", "tool_call_id": ..., "content": "42"}], False
    step = env.step({"role": "assistant", "content": "The answer is 42."})
    step.done, step.reward, step.scores      # True, 1.0, {"correct": True, ...}

Limits are the environment's: ``max_turns`` replies and ``max_tokens`` tokens after the opening
prompt (the model's replies and the environment's messages, as the chat template renders them).
The rollout (``toolbox.rl.episodes``) enforces them: an episode that reaches one ends there, with
``limit_reward()`` (0.0 unless the environment says otherwise).

A task is a record of the run's training data (a dict); an environment is built fresh for every
episode, so it needs no reset of its own state between episodes. A user's environment is a
``TextEnv`` subclass registered through the entry-point group ``toolbox.text_env``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from toolbox.core.errors import ConfigError


@dataclass
class Opening:
    """What an episode starts with: the conversation so far and the tools offered (OpenAI dicts)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


@dataclass
class ToolRun:
    """One tool call the environment executed: its id, name, JSON arguments and reply."""

    id: str
    name: str
    arguments: str
    result: str


@dataclass
class Step:
    """The environment's answer to one reply.

    ``messages``: what the model reads next (tool replies, a user turn; empty when done);
    ``reward``: the episode's reward, once ``done``; ``scores``: further named judgements of the
    episode (booleans, numbers), recorded with its trace; ``tool_runs``: the calls executed.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    reward: float | None = None
    scores: dict[str, float | bool | str] = field(default_factory=dict)
    tool_runs: list[ToolRun] = field(default_factory=list)


class TextEnv(ABC):
    """One episode of a text task (see the module docstring).

    Args:
        max_turns: the most replies of the model in an episode.
        max_tokens: the most tokens of an episode after its opening prompt (replies and the
            environment's messages).
    """

    #: the names of the scores a done episode's ``Step.scores`` holds (the ``env_episodes``
    #: evaluator reports each as ``eval/<name>``); an environment that names none reports its reward
    score_names: tuple[str, ...] = ()

    def __init__(self, max_turns: int = 4, max_tokens: int = 256) -> None:
        if max_turns < 1 or max_tokens < 1:
            raise ConfigError(f"text_env: max_turns={max_turns}, max_tokens={max_tokens}; both must be >= 1.")
        self.max_turns = max_turns
        self.max_tokens = max_tokens

    @abstractmethod
    def reset(self, task: dict[str, Any]) -> Opening:
        """Start the episode of ``task`` (a record of the training data)."""

    @abstractmethod
    def step(self, message: dict[str, Any]) -> Step:
        """The model's reply in, what follows out."""

    def limit_reward(self) -> float:
        """The reward of an episode that hit a limit (turns, tokens, a reply cut short)."""
        return 0.0
