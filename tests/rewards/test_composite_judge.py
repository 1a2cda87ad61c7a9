"""Composite rewards (weights, None skips, raising components) and the LLM judge (robust parsing)."""

from __future__ import annotations

import logging
import math

import pytest

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.composite import CompositeReward
from toolbox.rewards.judge import LLMJudge, parse_score
from toolbox.serving.engine import Completion, InferenceEngine, RequestOutput


def _spec(**components):
    return {"name": "composite", "components": components}


def test_weighted_sum_and_per_component_metrics():
    reward = REWARDS.build(
        _spec(
            correct={"name": "numeric_match", "weight": 1.0},
            fmt={"name": "format_regex", "pattern": r"-?\d+", "weight": 0.5},
        )
    )
    result = reward.score(["q"] * 3, ["12", "the answer is 12", "13"], answer=["12", "12", "12"])
    assert result.total.tolist() == [1.5, 1.0, 0.5]
    assert result.names == ["correct", "fmt"]
    assert result.metrics["rewards/correct/mean"] == pytest.approx(2 / 3)
    assert result.metrics["rewards/fmt/mean"] == pytest.approx(2 / 3)
    assert reward(["q"], ["12"], answer=["12"]) == [1.5]


def test_none_skips_the_component_for_that_sample_only():
    def maybe(prompts, completions, **kw):
        return [None, 1.0, None]

    def always(prompts, completions, **kw):
        return [2.0, 2.0, None]

    reward = CompositeReward({"maybe": maybe, "always": always})
    result = reward.score(["q"] * 3, ["a", "b", "c"])
    assert result.total.tolist()[:2] == [2.0, 3.0]
    assert math.isnan(result.total[2].item())  # every component skipped: unscorable
    assert result.totals()[2] is None
    assert result.metrics["rewards/maybe/skipped"] == 2.0 and result.metrics["rewards/unscorable"] == 1.0


def _boom(prompts, completions, **kw):
    raise RuntimeError("broken grader")


@pytest.mark.parametrize(("on_error", "expected"), [("skip", [1.0, 1.0]), ("zero", [1.0, 1.0])])
def test_raising_component_is_logged_by_name_and_handled(on_error, expected, caplog):
    def ok(prompts, completions, **kw):
        return [1.0] * len(completions)

    reward = CompositeReward({"ok": ok, "flaky": _boom}, on_error=on_error)
    with caplog.at_level(logging.WARNING):
        result = reward.score(["q", "q"], ["a", "b"])
    assert result.total.tolist() == expected
    assert "flaky" in caplog.text and "broken grader" in caplog.text
    assert result.metrics["rewards/flaky/errors"] == 1.0
    column = result.per_component[:, 1].tolist()
    assert all(math.isnan(v) for v in column) if on_error == "skip" else column == [0.0, 0.0]


def test_raise_policy_propagates():
    with pytest.raises(RuntimeError, match="broken grader"):
        CompositeReward({"flaky": _boom}, on_error="raise").score(["q"], ["a"])


def test_wrong_length_and_nan_scores_are_handled():
    reward = CompositeReward({"short": lambda p, c, **k: [1.0], "nan": lambda p, c, **k: [float("nan"), 1.0]})
    result = reward.score(["q", "q"], ["a", "b"])
    assert math.isnan(result.total[0].item()) and result.total[1].item() == 1.0


def test_config_errors():
    with pytest.raises(ConfigError, match="components"):
        REWARDS.build({"name": "composite", "components": {}})
    with pytest.raises(ConfigError, match="on_error"):
        REWARDS.build(
            {"name": "composite", "components": {"a": {"name": "exact_string"}}, "on_error": "ignore"}
        )
    with pytest.raises(ConfigError, match="nope"):
        REWARDS.build(
            {"name": "composite", "components": {"a": {"name": "exact_string"}}, "weights": {"nope": 1}}
        )


# the judge ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Score: 7", 7.0),
        ("I'd give it 8/10.", 8.0),
        ("**9**", 9.0),
        ('{"score": 6, "why": "ok"}', 6.0),
        ("rating = 4.5", 4.5),
        ("7 out of 10", 7.0),
        ("5\n", 5.0),
        ("Score: 11", None),  # out of range
        ("It is good.", None),
        ("", None),
    ],
)
def test_parse_score(reply, score):
    assert parse_score(reply, 0, 10) == score


class FakeEngine(InferenceEngine):
    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts += list(prompts)
        return [RequestOutput([], [Completion([], self.replies.pop(0), "stop")]) for _ in prompts]


def test_judge_normalises_and_counts_parse_failures():
    engine = FakeEngine(["Score: 8", "no idea", "Score: 2"])
    judge = LLMJudge(engine, template="Q={prompt} A={completion} ref={answer}")
    assert judge(["q1", "q2", "q3"], ["a", "b", "c"], answer=["x", "y", "z"]) == [0.8, None, 0.2]
    assert engine.prompts[0] == "Q=q1 A=a ref=x"
    assert judge.metrics() == {"parse_failures": 1.0, "requests": 3.0}


def test_judge_inside_composite_never_crashes_the_batch():
    judge = LLMJudge(FakeEngine(["garbage", "Score: 10"]), normalize=False)
    reward = CompositeReward({"judge": judge, "one": lambda p, c, **k: [1.0, 1.0]})
    result = reward.score(["q", "q"], ["a", "b"])
    assert result.total.tolist() == [1.0, 11.0]
    assert result.metrics["rewards/judge/parse_failures"] == 1.0
