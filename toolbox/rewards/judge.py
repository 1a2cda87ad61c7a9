"""LLM-as-judge reward: ask any ``InferenceEngine`` to grade a completion, parse the score.

The judge's prompt is ``template`` filled with ``{prompt}``, ``{completion}`` and any sample field
(``{answer}``); the engine answers in free text and :func:`parse_score` finds the grade in it
("Score: 7/10", "**8**", "rating = 4.5", ``{"score": 9}``, "7 out of 10"). A reply with no
readable score in range gives ``None`` (the sample is skipped for this reward) and counts in the
``parse_failures`` metric; it never raises.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from toolbox.core.errors import ConfigError
from toolbox.core.registries import REWARDS
from toolbox.rewards.base import Reward

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Rate the response to the question on a scale from {low} to {high}, where {high} is a perfect answer.\n"
    "Question: {prompt}\nResponse: {completion}\n"
    "Reply with the line 'Score: N'."
)
_NUM = r"(-?\d+(?:\.\d+)?)"
PATTERNS = (
    re.compile(r"(?:score|rating|grade)\s*[\"']?\s*[:=]\s*\**\s*" + _NUM, re.IGNORECASE),
    re.compile(_NUM + r"\s*(?:/|out\s+of)\s*\d+(?:\.\d+)?", re.IGNORECASE),
    re.compile(r"\*\*\s*" + _NUM + r"\s*\*\*"),
    re.compile(r"^\s*" + _NUM + r"\s*\.?\s*$", re.MULTILINE),
)


def parse_score(text: str, low: float = 0.0, high: float = 10.0) -> float | None:
    """The first score in ``text`` that lies in [low, high], trying the patterns above in order."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped[: stripped.rfind("}") + 1])
            for key in ("score", "rating", "grade"):
                if isinstance(data, dict) and isinstance(data.get(key), int | float):
                    value = float(data[key])
                    return value if low <= value <= high else None
        except (ValueError, TypeError):
            pass
    for pattern in PATTERNS:
        for m in pattern.finditer(text):
            value = float(m.group(1))
            if low <= value <= high:
                return value
    return None


@REWARDS.register("llm_judge")
class LLMJudge(Reward):
    """A grade from a judge model, mapped to [0, 1] (or left raw).

    Args:
        engine: the judge: an engine spec (``{name: http, base_url: ..., model: ...}`` or
            ``{name: hf, path: ...}``, built through ENGINES), or an InferenceEngine in code.
        template: the judge's prompt; ``{prompt}``, ``{completion}``, ``{low}``, ``{high}`` and any
            sample field are filled in.
        low: the lowest grade on the scale.
        high: the highest grade on the scale.
        normalize: map grades to [0, 1] with (grade − low) / (high − low).
        max_tokens: tokens the judge may write.
        temperature: the judge's sampling temperature (0: greedy).
        chat: send the prompt as a user message through the engine's chat template.
    """

    def __init__(
        self,
        engine: Any,
        template: str = DEFAULT_TEMPLATE,
        low: float = 0.0,
        high: float = 10.0,
        normalize: bool = True,
        max_tokens: int = 32,
        temperature: float = 0.0,
        chat: bool = False,
    ) -> None:
        if high <= low:
            raise ConfigError(f"reward.low={low} must be below reward.high={high}.")
        if isinstance(engine, Mapping):
            from toolbox.core.registries import ENGINES

            engine = ENGINES.build(dict(engine), "reward.engine")
        self.engine = engine
        self.template = template
        self.low, self.high = low, high
        self.normalize = normalize
        self.chat = chat
        from toolbox.serving.engine import SamplingParams

        self.params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
        self.parse_failures = 0
        self.requests = 0

    def _fill(self, prompt: Any, completion: str, sample: dict[str, Any]) -> str:
        values = {**sample, "prompt": prompt, "completion": completion, "low": self.low, "high": self.high}
        try:
            return self.template.format(**values)
        except (KeyError, IndexError) as e:
            raise ConfigError(f"reward.template names {e} which the samples do not have.") from None

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        texts = [
            self._fill(p, c, {k: v[i] for k, v in fields.items()})
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
        ]
        if self.chat:
            outputs = self.engine.chat([[{"role": "user", "content": t}] for t in texts], self.params)
        else:
            outputs = self.engine.generate(texts, self.params)
        scores: list[float | None] = []
        for out in outputs:
            reply = out.completions[0].text if out.completions else ""
            grade = parse_score(reply, self.low, self.high)
            self.requests += 1
            if grade is None:
                self.parse_failures += 1
                log.debug("llm_judge: no score in reply %r", reply[:200])
                scores.append(None)
            elif self.normalize:
                scores.append((grade - self.low) / (self.high - self.low))
            else:
                scores.append(grade)
        return scores

    def metrics(self) -> dict[str, float]:
        out = {"parse_failures": float(self.parse_failures), "requests": float(self.requests)}
        self.parse_failures = self.requests = 0
        return out
