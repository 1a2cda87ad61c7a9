"""The reader's contracts: shared-prefix groups equal flat prompts, bad input errors, the judge reward."""

from __future__ import annotations

import numpy as np
import pytest

from toolbox.decision import ChatTemplateError, DecisionReader, LabelTokenError, Question, QuestionError
from toolbox.decision.backends.hf import HFDecisionBackend
from toolbox.decision.backends.torch import TorchDecisionBackend

STATES = ["I lost my card", "balance please", "send money to mom", "refund", "card gone", "how much left"]


def test_shared_prefix_equals_flat_prompts(tiny_model):
    model, tok, _ = tiny_model
    q = Question.choice("Which intent is this?", ["lost card", "balance", "transfer", "refund", "other"])
    shared = DecisionReader(TorchDecisionBackend(model, tok, max_batch_size=12), prior="none")
    flat = DecisionReader(TorchDecisionBackend(model, tok), prior="none", share_prefix=False)
    a = np.stack([d.diagnostics["p_by_position"] for d in shared.decide_batch(STATES, q)])
    b = np.stack([d.diagnostics["p_by_position"] for d in flat.decide_batch(STATES, q)])
    assert shared.stats["groups"] == len(STATES) and shared.stats["grouped_prompts"] == 5 * len(STATES)
    assert flat.stats["groups"] == 0
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_decisions_carry_level_and_answers(tiny_model):
    model, tok, _ = tiny_model
    reader = DecisionReader(HFDecisionBackend(model, tok), min_prior_n=2)
    yes_no = Question.yes_no("Is the customer angry?")
    score = Question.score("How urgent is it?", ["low", "medium", "high"])
    [[d_yes, d_score]] = reader.decide(["my card is gone!"], [yes_no, score], level="L0")
    assert d_yes.level == "L0" and isinstance(d_yes.answer, bool) and 0 < d_yes.p_yes < 1
    assert abs(d_score.value - float(np.dot(d_score.probs, [0, 1, 2]))) < 1e-12
    assert d_yes.require("raw") is d_yes and abs(d_yes.probs.sum() - 1) < 1e-9


def test_bad_questions_name_the_fix(tiny_model):
    model, tok, _ = tiny_model
    with pytest.raises(QuestionError, match="at most 26 options"):
        Question.choice("?", [f"o{i}" for i in range(27)])
    with pytest.raises(QuestionError, match="2 to 10 levels, got 1; use a yes_no question"):
        Question.score("?", 1)
    with pytest.raises(QuestionError, match="2 to 10 levels, got 1; add a level"):
        Question.score("?", ["only"])
    tok_no_template = type(tok).from_pretrained(tiny_model[2])
    tok_no_template.chat_template = None
    reader = DecisionReader(HFDecisionBackend(model, tok_no_template))
    with pytest.raises(ChatTemplateError, match="set tokenizer.chat_template .* prompt_format='plain'"):
        reader.decide(["x"], [Question.yes_no("ok?")])
    plain = DecisionReader(HFDecisionBackend(model, tok_no_template), prompt_format="plain")
    assert plain.decide(["x"], [Question.yes_no("ok?")])[0][0].probs.shape == (2,)


def test_label_that_is_not_one_token(tiny_model):
    from toolbox.decision.prompt import label_token_ids

    _, tok, _ = tiny_model
    with pytest.raises(LabelTokenError, match="'Maybe' is not one token"):
        label_token_ids(tok, ["Yes", "Maybe"])


def test_decision_judge_reward(tiny_model):
    from toolbox.core.registries import REWARDS
    from toolbox.serving.engines.torch.engine import TorchEngine

    model, tok, _ = tiny_model
    engine = TorchEngine(model=model, tokenizer=tok, max_batch_size=8)
    try:
        judge = REWARDS.build({"name": "decision_judge", "engine": engine, "level": "raw"}, "reward")
        scores = judge(["What is 2+2?", "What is 2+2?"], ["4", "5"])
        want = [
            d.p_yes
            for d in DecisionReader(TorchDecisionBackend(model, tok)).decide_batch(
                ["Request: What is 2+2?\nResponse: 4", "Request: What is 2+2?\nResponse: 5"],
                Question.yes_no("Is the response a correct and complete answer to the request?"),
                level="raw",
            )
        ]
        np.testing.assert_allclose(scores, want, atol=1e-9)
        graded = REWARDS.build(
            {"name": "decision_judge", "engine": engine, "kind": "score", "levels": 4}, "reward"
        )
        values = graded(["q"] * 3, ["a", "b", "c"])
        assert all(0.0 <= v <= 1.0 for v in values)
    finally:
        engine.shutdown()
