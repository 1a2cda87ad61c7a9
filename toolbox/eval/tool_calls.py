"""``tool_calls``: the tool-calling agent of examples/agent_tools, run in-process on the held-out
conversations, scored as that agent scores its runs.

Each held-out record's conversation up to its first assistant turn (the question) is rendered with
the record's ``tools`` as ``toolbox serve`` renders a chat request (``tool_calls.template_messages``,
then the tokenizer's chat template with the generation prompt), and the model answers greedily,
at most ``max_new_tokens`` tokens, as the agent asks the server (``max_tokens=32``, temperature 0).
The reply's calls are cut out by the server's parser (``tool_calls.parse``) and executed with the
``arithmetic_tools`` source's calculator (``run_call``); the calls and their replies join the
conversation and the model answers again, up to ``max_turns`` replies, until one holds no call.
A conversation grown past the model's context (prompt + ``max_new_tokens`` over its positions) ends
there unanswered, as the server refuses it.

Metrics:

- ``eval/tool_call_success``: the first reply called the calculator with an expression whose value
  is the record's answer (the agent's ``tool_call_ok``);
- ``eval/answer_accuracy``: the final reply's last integer is the answer (the agent's ``correct``);
- ``eval/answer_after_call``: answer accuracy among the conversations whose first call was right
  (0 when none was): whether the model copies the tool's reply into its answer.

On the agent's held-out problems (the source's test split) the first two are the numbers
``agent.py`` reports for the same model through the server (greedy both ways), so a run can stop
on them (``callbacks.early_stopping``) while it trains.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@EVALUATORS.register("tool_calls")
class ToolCalls:
    """The tool-calling agent on the held-out records, in-process and greedy: ``eval/tool_call_success``,
    ``eval/answer_accuracy``, ``eval/answer_after_call`` (see the module docstring).

    Args:
        max_examples: run the first this many held-out records (None: all).
        max_new_tokens: tokens per reply (the agent's ``max_tokens``).
        max_turns: replies per conversation (the agent's).
        batch_size: conversations generated together (left-padded).
        answer_field: the record field holding the expected answer.
        field: the record field holding the conversation (its messages before the first assistant
            turn are the prompt).
    """

    def __init__(
        self,
        max_examples: int | None = 200,
        max_new_tokens: int = 32,
        max_turns: int = 3,
        batch_size: int = 64,
        answer_field: str = "answer",
        field: str = "messages",
    ) -> None:
        if max_turns < 1 or max_new_tokens < 1:
            raise ConfigError(
                f"eval.tool_calls: max_turns={max_turns}, max_new_tokens={max_new_tokens}; both must be >= 1."
            )
        self.max_examples = max_examples
        self.max_new_tokens = max_new_tokens
        self.max_turns = max_turns
        self.batch_size = batch_size
        self.answer_field = answer_field
        self.field = field
        self.last_runs: list[dict[str, Any]] = []

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.data.datasets.chat import record_tools
        from toolbox.data.hermes.calls import parse, template_messages
        from toolbox.data.sources.arithmetic_tools import final_answer, run_call
        from toolbox.eval.generation import greedy_generate_ids

        records = parts.test_records[: self.max_examples] if self.max_examples else parts.test_records
        if not len(records) or self.answer_field not in records[0] or self.field not in records[0]:
            keys = ", ".join(map(str, records[0])) if len(records) else "no held-out records"
            raise ConfigError(
                f"eval.tool_calls: the held-out records need '{self.field}' (a conversation) and "
                f"'{self.answer_field}' (its answer); they have: {keys}. Use it on a tool-calling source "
                "such as arithmetic_tools, or remove it with eval.tool_calls=null."
            )
        tokenizer = parts.tokenizer
        model = parts.strategy.unwrap(parts.model)
        template = str(tokenizer.chat_template or "")
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        runs = [
            {
                "messages": _opening(r[self.field]),
                "tools": record_tools(r),
                "answer": str(r[self.answer_field]),
                "tool_call_ok": False,
                "final": "",
                "replies": [],
            }
            for r in records
        ]
        active = list(range(len(runs)))
        for turn in range(self.max_turns):
            prompts = {}
            for i in active:
                messages, tools = template_messages(runs[i]["messages"], runs[i]["tools"], template)
                ids = _ids(tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True))
                if limit is None or len(ids) + self.max_new_tokens <= limit:
                    prompts[i] = ids  # (else the server refuses the request: the run ends unanswered)
            order = list(prompts)
            texts = greedy_generate_ids(
                model,
                tokenizer,
                [prompts[i] for i in order],
                self.max_new_tokens,
                self.batch_size,
                parts.strategy.device,
            )
            active = []
            for i, text in zip(order, texts, strict=True):
                run = runs[i]
                run["replies"].append(text)
                content, calls = parse(text)
                if not calls:
                    run["final"] = content or ""
                    continue
                results = []
                assistant = {"role": "assistant", "content": content or "", "tool_calls": []}
                replies = []
                for k, call in enumerate(calls):
                    call_id = f"call_{turn}_{k}"
                    assistant["tool_calls"].append(
                        {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                    )  # fmt: skip
                    result = run_call(call.name, call.arguments)[1]
                    results.append(call.name == "calculator" and result == run["answer"])
                    replies.append({"role": "tool", "tool_call_id": call_id, "content": result})
                run["messages"] += [assistant, *replies]
                if turn == 0:
                    run["tool_call_ok"] = any(results)
                active.append(i)
        for run in runs:
            run["correct"] = final_answer(run["final"]) == run["answer"]
        self.last_runs = runs
        n = max(len(runs), 1)
        called = [r for r in runs if r["tool_call_ok"]]
        return {
            "eval/tool_call_success": len(called) / n,
            "eval/answer_accuracy": sum(r["correct"] for r in runs) / n,
            "eval/answer_after_call": sum(r["correct"] for r in called) / max(len(called), 1),
        }


def _opening(messages: Any) -> list[dict[str, Any]]:
    """The conversation before its first assistant turn (the question the agent asks)."""
    if isinstance(messages, str):
        messages = json.loads(messages)
    out = []
    for m in messages:
        if m["role"] == "assistant":
            break
        out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


def _ids(encoded: Any) -> list[int]:
    """``apply_chat_template(tokenize=True)``'s ids (a list, or a mapping holding ``input_ids``)."""
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return [int(t) for t in encoded]
