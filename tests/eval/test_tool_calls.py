"""The ``tool_calls`` evaluator: the agent of examples/agent_tools in-process, scored as the agent
scores its runs, against a scripted model whose replies are known (right call, wrong call, no
call; copied answer, wrong answer), and the agent_tools experiment stopping on its metric."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS, TOKENIZERS
from toolbox.data.sources.arithmetic_tools import arithmetic_tools, final_answer, run_call

# a call is ~80 characters, one token each with the char tokenizer (a trained BPE's is ~20 tokens)
SETTINGS = {"name": "tool_calls", "max_new_tokens": 128}


class ScriptedModel:
    """``generate`` as a causal LM's: each (left-padded) prompt is decoded and answered by a script:
    ``first(question)`` is the first reply; after a tool reply, ``then(question, reply)``."""

    def __init__(self, tokenizer, first, then, max_positions: int = 4096) -> None:
        self.tokenizer, self.first, self.then = tokenizer, first, then
        self.config = SimpleNamespace(max_position_embeddings=max_positions)
        self.prompts: list[str] = []

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **_):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
            self.prompts.append(text)
            question = re.findall(r"(A [^<]*\?|There are [^<]*\?)", text)[0]
            if "<tool_call>" not in text:
                reply = self.first(question)
            else:
                reply = self.then(question, re.findall(r"-?\d+", text)[-1])
            new = self.tokenizer.encode(reply, add_special_tokens=False)[: max_new_tokens - 1] + [
                eos_token_id
            ]
            rows.append(new)
        width = max(len(r) for r in rows)
        out = [r + [pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(out, dtype=torch.long)], dim=1)


@pytest.fixture(scope="module")
def records():
    return arithmetic_tools(num_train=20, num_test=5, digits=2, fixed_width=True, templates=3).test


@pytest.fixture(scope="module")
def tokenizer(records):
    texts = [json.dumps(r["messages"]) + r["tools"] + r["tool_call_text"] for r in records]
    return TOKENIZERS.build({"name": "char"}, corpus=[*texts, "The answer is 0123456789-."])


def call(expression: str) -> str:
    return '<tool_call>{"name":"calculator","arguments":{"expression":"' + expression + '"}}</tool_call>'


def parts(records, tokenizer, model):
    return SimpleNamespace(
        test_records=records, tokenizer=tokenizer, model=model,
        strategy=SimpleNamespace(unwrap=lambda m: m, device="cpu"),
    )  # fmt: skip


def test_scores_runs_as_the_agent_does(records, tokenizer):
    """Five held-out problems: 0, 1 call right and copy the reply; 2 calls right and answers 7; 3
    calls a wrong expression and copies its reply; 4 calls nothing and answers 7."""
    by_question = {r["question"]: i for i, r in enumerate(records)}

    def first(question):
        i = by_question[question]
        r = records[i]
        a, op, b = re.match(r"(\d+)([-+*])(\d+)", r["expression"]).groups()
        return {3: call(f"{int(a) + 1}{op}{b}"), 4: "The answer is 7."}.get(i, call(r["expression"]))

    def then(question, reply):
        return "The answer is 7." if by_question[question] == 2 else f"The answer is {reply}."

    model = ScriptedModel(tokenizer, first, then)
    evaluator = EVALUATORS.build(SETTINGS, "eval.tool_calls")
    metrics = evaluator(parts(records, tokenizer, model))
    assert metrics == {
        "eval/tool_call_success": pytest.approx(3 / 5),
        "eval/answer_accuracy": pytest.approx(2 / 5),
        "eval/answer_after_call": pytest.approx(2 / 3),
    }
    runs = evaluator.last_runs
    assert [r["tool_call_ok"] for r in runs] == [True, True, True, False, False]
    assert [r["correct"] for r in runs] == [True, True, False, False, False]
    # the second turn saw the call and the calculator's reply, rendered as the server renders them
    wrong = runs[3]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    assert runs[3]["messages"][-1]["content"] == run_call("calculator", wrong)[1] != records[3]["answer"]
    second = [p for p in model.prompts if "<tool_call>" in p]
    assert len(second) == 4 and all("<tools>" in p for p in model.prompts)
    assert final_answer(runs[0]["final"]) == records[0]["answer"]
    assert runs[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0_0",
        "content": records[1]["answer"],
    }


def test_a_conversation_past_the_context_ends_unanswered(records, tokenizer):
    """As the server refuses a prompt + max_tokens over the model's positions: the first reply fits,
    the second (after the call and its reply) does not, so no answer is given."""
    listing = "<tools>" + json.dumps(
        [t["function"] for t in json.loads(records[0]["tools"])], separators=(",", ":")
    )
    first_length = max(
        len(tokenizer.apply_chat_template(
            [{"role": "system", "content": listing + "</tools>"}, {"role": "user", "content": r["question"]}],
            add_generation_prompt=True, return_dict=True)["input_ids"])
        for r in records
    )  # fmt: skip
    model = ScriptedModel(
        tokenizer, lambda q: call(next(r["expression"] for r in records if r["question"] == q)),
        lambda q, reply: f"The answer is {reply}.", max_positions=first_length + 128,
    )  # fmt: skip
    metrics = EVALUATORS.build(SETTINGS, "eval.tool_calls")(parts(records, tokenizer, model))
    assert metrics["eval/tool_call_success"] == 1.0 and metrics["eval/answer_accuracy"] == 0.0
    assert not [p for p in model.prompts if "<tool_call>" in p]


def test_records_without_answers_are_refused(tokenizer):
    evaluator = EVALUATORS.build(SETTINGS, "eval.tool_calls")
    with pytest.raises(ConfigError, match="'answer'.*they have: prompt, completion"):
        evaluator(parts([{"prompt": "1+1", "completion": "2"}], tokenizer, None))


def test_agent_tools_stops_on_the_evaluators_metric():
    import contextlib
    import io

    import yaml

    from toolbox.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["compose", "experiment=agent_tools"])
    cfg = yaml.safe_load(out.getvalue())
    stop = cfg["callbacks"]["early_stopping"]
    assert (stop["monitor"], stop["mode"], stop["stopping_threshold"]) == (
        "eval/tool_call_success",
        "max",
        0.5,
    )
    assert (
        cfg["eval"]["tool_calls"]["name"] == "tool_calls" and cfg["eval"]["tool_calls"]["max_examples"] == 200
    )
    # the agent's held-out problems are that many of the same source's test split
    assert cfg["data"]["source"]["num_test"] >= cfg["eval"]["tool_calls"]["max_examples"]
