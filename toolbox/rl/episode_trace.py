"""An episode as a trace: the records ``toolbox traces show`` and ``to-dataset`` read.

One trace per episode, shaped as the agent of examples/agent_tools records its runs through the
server::

    agent  <env name>        inputs: the opening; outputs: the last message; scores: reward, and
    │                        the environment's (correct, tool_call_ok, ...), source "env"
    ├─ decision  turn        one per reply, inputs {"turn": k}
    │  ├─ llm_call  chat     inputs: the conversation the model read; outputs: its reply; tools;
    │  │                     input/output tokens; finish reason
    │  └─ tool_call <name>   one per executed call: arguments in, the tool's reply out
    └─ ...

Sessions group a task's G episodes (``session_id``: the run's step and the task's index), so a
split by session keeps a GRPO group on one side. Messages are in the GenAI form of
``toolbox.tracing.record`` (``chat_to_messages``).
"""

from __future__ import annotations

import json
from typing import Any

from toolbox.rl.episodes import Episode
from toolbox.tracing.record import ActionRecord, Score, chat_to_messages, new_span_id, new_trace_id
from toolbox.tracing.stores import Query
from toolbox.tracing.tracer import Tracer


def episode_records(
    episode: Episode, session_id: str, model: str | None = None, metadata: dict[str, Any] | None = None
) -> list[ActionRecord]:
    """The records of one finished episode (root first)."""
    trace_id = new_trace_id()
    root = ActionRecord(
        kind="agent", name=_env_name(episode),
        id=new_span_id(), trace_id=trace_id, session_id=session_id,
        inputs=chat_to_messages(episode.messages[: episode.opening]),
        outputs=chat_to_messages(episode.messages[-1:]), tools=episode.tools, model=model,
        finish_reason=episode.finish_reason, start_time=episode.start, end_time=episode.end,
        metadata={**(metadata or {}), "group": episode.group, "generation": episode.index,
                  "turns": len(episode.turns), "tokens": len(episode.ids)},
    )  # fmt: skip
    root.scores.append(Score("reward", float(episode.reward or 0.0), source="env"))
    for name, value in episode.scores.items():
        root.scores.append(Score(name, value, source="env"))
    records = [root]
    for k, turn in enumerate(episode.turns):
        span = ActionRecord(
            kind="decision", name="turn", id=new_span_id(), parent_id=root.id, trace_id=trace_id,
            session_id=session_id, inputs={"turn": k}, start_time=turn.start, end_time=turn.end,
        )  # fmt: skip
        call = ActionRecord(
            kind="llm_call", name="chat", id=new_span_id(), parent_id=span.id, trace_id=trace_id,
            session_id=session_id, inputs=chat_to_messages(turn.messages),
            outputs=chat_to_messages([turn.message]), tools=episode.tools, model=model,
            input_tokens=turn.prompt_tokens, output_tokens=turn.reply_tokens,
            finish_reason=turn.finish_reason, start_time=turn.start, end_time=turn.end,
        )  # fmt: skip
        records += [span, call]
        for run in turn.step.tool_runs if turn.step is not None else []:
            try:
                arguments: Any = json.loads(run.arguments)
            except ValueError:
                arguments = run.arguments
            records.append(
                ActionRecord(
                    kind="tool_call",
                    name=run.name,
                    id=new_span_id(),
                    parent_id=span.id,
                    trace_id=trace_id,
                    session_id=session_id,
                    inputs=arguments,
                    outputs=run.result,
                    start_time=turn.end,
                    end_time=turn.end,
                    metadata={"tool_call_id": run.id},
                )  # fmt: skip
            )
    return records


def _env_name(episode: Episode) -> str:
    """The environment's registered name (an episode of an agent program has none: ``agent``)."""
    if episode.env is None:
        return "agent"
    return str(getattr(type(episode.env), "_registry_name", type(episode.env).__name__))


def forget_rounds_after(tracer: Tracer, step: int) -> int:
    """Remove the traces of rounds after ``step`` from ``tracer``'s store (a trainer resumed from
    the checkpoint of ``step`` runs them again: each round is recorded once). Returns the number of
    records removed."""
    tracer.flush()
    later = [
        r.trace_id
        for r in tracer.store.query(Query(kind="agent"))
        if isinstance(r.metadata.get("step"), int) and r.metadata["step"] > step
    ]
    return tracer.store.delete_traces(later) if later else 0


def trace_episodes(tracer: Tracer, episodes: list[Episode], step: int, model: str | None = None) -> None:
    """Record every episode of a round (``step``) into ``tracer``'s store."""
    for episode in episodes:
        session = f"step{step}-task{episode.group}"
        for record in episode_records(episode, session, model, {"step": step}):
            tracer.emit(record)
    tracer.flush()
