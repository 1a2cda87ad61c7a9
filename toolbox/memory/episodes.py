"""Episodes in an episodic memory, as agents and the ``memory_writer`` callback write them.

Agents call ``write_episode`` after a task and ``recall`` before one (it formats the best memories
as a block to put into the prompt); ``failure_text`` is how a failed evaluation example reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolbox.memory.store import EpisodicMemory


def failure_text(prompt: str, reference: str, output: str) -> str:
    return f"Prompt: {prompt}\nExpected: {reference}\nModel answered: {output}"


def write_episode(
    memory: EpisodicMemory,
    task: str,
    outcome: str,
    steps: Sequence[str] = (),
    success: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    importance: float = 0.0,
) -> int:
    """Store one agent episode (the task, what was done, how it ended); return its id."""
    lines = [f"Task: {task}", *(f"Step {i + 1}: {s}" for i, s in enumerate(steps)), f"Outcome: {outcome}"]
    meta = {"kind": "agent_episode", "task": task, **({"success": success} if success is not None else {})}
    meta.update(metadata or {})
    return memory.add("\n".join(lines), metadata=meta, importance=importance)


def recall(
    memory: EpisodicMemory, query: str, k: int = 3, filters: Mapping[str, Any] | None = None, **search: Any
) -> str:
    """The ``k`` best memories for ``query`` as a prompt block ("" when there are none)."""
    items = memory.search(query, k=k, filters=filters, **search)
    if not items:
        return ""
    body = "\n\n".join(f"[memory {it.id}, similarity {it.similarity:.2f}]\n{it.text}" for it in items)
    return f"Relevant memories:\n\n{body}\n"
