"""A scripted engine for episode rollouts: each reply is a function of the decoded prompt, as the
agent of examples/agent_tools would answer (a right calculator call, then the tool's reply as the
answer), so multi-turn episodes are known in advance."""

from __future__ import annotations

import json
import re

import pytest

from toolbox.serving.engine import Completion, InferenceEngine, RequestOutput, SamplingParams


def call(name: str, **arguments) -> str:
    """A call as the served model writes it (compact JSON, as ``render_call``)."""
    return (
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))
        + "</tool_call>"
    )


def solve(prompt: str) -> str:
    """The agent: the calculator task and the lookup task, solved in order."""
    replies = re.findall(r"<\|tool\|>([^<]*)<\|eos\|>", prompt)
    question = re.findall(r"<\|user\|>([^<]*)<\|eos\|>", prompt)[-1]
    if "inventory" in question:
        item = re.search(r"find the (\w+) in", question)[1]
        b = re.findall(r"\d+", question)[0]
        op = "+" if "more" in question else "-" if "sells" in question else "*"
        if not replies:
            return call("lookup", item=item)
        if len(replies) == 1:
            return call("calculator", expression=f"{replies[0]}{op}{b}")
        return f"The answer is {replies[-1]}."
    if not replies:
        a, b = re.findall(r"\d+", question)[:2]
        op = "+" if "more" in question else "-" if "taken" in question else "*"
        return call("calculator", expression=f"{a}{op}{b}")
    return f"The answer is {replies[-1]}."


class Handle:
    def __init__(self, output: RequestOutput, polls: int) -> None:
        self.output, self.polls = output, polls

    @property
    def done(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def result(self, timeout=None) -> RequestOutput:
        return self.output


class ScriptedEngine(InferenceEngine):
    """Replies of ``policy(prompt text)``, eos-terminated, with made-up log-probs; ``log`` keeps
    every request's (prompt ids, params, the prompt ids of the requests in flight when it was
    submitted)."""

    supports_submit = True

    def __init__(self, tokenizer, policy=solve, max_model_len=None) -> None:
        self.tokenizer, self.policy, self.max_model_len = tokenizer, policy, max_model_len
        self.log: list[tuple[list[int], SamplingParams, list]] = []
        self.in_flight: list[tuple[Handle, list[int]]] = []

    def reply(self, ids: list[int], params: SamplingParams) -> Completion:
        text = self.policy(self.tokenizer.decode(ids))
        tokens = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        reason = "stop"
        if len(tokens) > params.max_tokens:
            tokens, reason = tokens[: params.max_tokens], "length"
        shown = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Completion(tokens, shown, reason, [-0.5 - 0.01 * k for k in range(len(tokens))])

    def generate(self, prompts, params):
        return [
            RequestOutput(list(p), [self.reply(list(p), params) for _ in range(params.n)]) for p in prompts
        ]

    def submit_request(self, prompt, params, *, request_id=None, stream=True, queue_limit=True):
        self.in_flight = [(h, p) for h, p in self.in_flight if h.polls >= 0]
        ids = list(prompt)
        output = self.generate([ids], params)[0]
        handle = Handle(output, polls=len(ids) % 7)  # replies come back after different waits
        self.log.append((ids, params, [p for _, p in self.in_flight]))
        self.in_flight.append((handle, ids))
        return handle


@pytest.fixture(scope="session")
def tool_tokenizer():
    from toolbox.core.registries import TOKENIZERS
    from toolbox.data.sources.arithmetic_tools import TOOLS, arithmetic_tools
    from toolbox.rl.text_envs.lookup import LOOKUP

    records = arithmetic_tools(num_train=40, num_test=8, digits=2, fixed_width=True, templates=3)
    texts = [json.dumps(r["messages"]) + r["tools"] + r["tool_call_text"] for r in records.train]
    extra = json.dumps([LOOKUP, *TOOLS]) + "How many does the store have after it gets sells The packs each "
    extra += "of its with labels. labels does need? first find in the inventory. lookup item error"
    return TOKENIZERS.build({"name": "char"}, corpus=[*texts, extra, "The answer is 0123456789-."])


@pytest.fixture(scope="session")
def tasks():
    from toolbox.data.sources.arithmetic_tools import arithmetic_tools

    return arithmetic_tools(num_train=40, num_test=8, digits=2, fixed_width=True, templates=3).train
