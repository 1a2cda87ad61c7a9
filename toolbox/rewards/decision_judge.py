"""Decision-readout judge: a judge model's probability, read from its label tokens, as the reward.

Where ``llm_judge`` lets the judge write a grade and parses it, this one asks a typed question about
(prompt, completion) and reads the answer distribution in one prefill (``toolbox.decision``): a
yes/no question gives ``p(Yes)``, a score question its expected value mapped to [0, 1]. Nothing is
generated, nothing can fail to parse, and at level ``L0`` the judge's label and position biases are
corrected without labels (the batch prior is estimated over the completions judged so far).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.base import Reward

DEFAULT_STATE = "Request: {prompt}\nResponse: {completion}"


@REWARDS.register("decision_judge")
class DecisionJudge(Reward):
    """p(Yes) (or a score's expected value in [0, 1]) of a judge model's decision readout.

    Args:
        engine: the judge: an engine spec (``{name: torch, path: ...}``, ``{name: http, base_url: ...,
            path: <tokenizer>}``, built through ENGINES), an InferenceEngine or a decision backend.
        question: the question asked about each (prompt, completion).
        kind: "yes_no" (reward: p(Yes)) or "score" (reward: the expected level, scaled to [0, 1]).
        levels: score only: the number of levels (2-10) or their descriptions, low to high.
        state: the state shown to the judge; ``{prompt}``, ``{completion}`` and sample fields filled in.
        level: the readout level ("raw" or "L0").
        prior: L0's label prior ("batch", "content_free", "none").
        prompt_format: "chat" (the judge's chat template) or "plain".
    """

    def __init__(
        self,
        engine: Any,
        question: str = "Is the response a correct and complete answer to the request?",
        kind: Literal["yes_no", "score"] = "yes_no",
        levels: int | list[str] = 5,
        state: str = DEFAULT_STATE,
        level: Literal["raw", "L0"] = "L0",
        prior: str = "batch",
        prompt_format: Literal["chat", "plain"] = "chat",
    ) -> None:
        from toolbox.decision import DecisionReader, Question
        from toolbox.decision.backends import backend_for

        if isinstance(engine, Mapping):
            from toolbox.core.registries import ENGINES

            engine = ENGINES.build(dict(engine), "reward.engine")
        if kind == "yes_no":
            self.question = Question.yes_no(question, name="judge")
        elif kind == "score":
            self.question = Question.score(question, levels, name="judge")
        else:
            raise ConfigError(f"reward.kind={kind!r}: use yes_no or score.")
        self.state = state
        self.level = level
        self.reader = DecisionReader(
            backend_for(engine), level=level, prior=prior, prompt_format=prompt_format
        )
        self.calls = 0

    def _state(self, prompt: Any, completion: str, sample: dict[str, Any]) -> str:
        try:
            return self.state.format(**{**sample, "prompt": prompt, "completion": completion})
        except (KeyError, IndexError) as e:
            raise ConfigError(f"reward.state names {e} which the samples do not have.") from None

    def decisions(self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any) -> list[Any]:
        """The judge's ``Decision`` per completion (distribution, level, diagnostics)."""
        states = [
            self._state(p, c, {k: v[i] for k, v in fields.items()})
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
        ]
        self.calls += 1
        return self.reader.decide_batch(states, self.question, level=self.level)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        out: list[float | None] = []
        for d in self.decisions(prompts, completions, **fields):
            if self.question.kind == "yes_no":
                out.append(d.p_yes)
            else:
                lo, hi = self.question.scale
                out.append((d.value - lo) / (hi - lo))
        return out

    def metrics(self) -> dict[str, float]:
        out = {"calls": float(self.calls)}
        self.calls = 0
        return out
