"""``http``: any OpenAI-compatible server (vLLM, SGLang, ``toolbox serve``) through the http engine.

Each prompt is sent as token ids to ``/completions`` for one greedy token with the top ``k``
log-probabilities of that step (``max_tokens=1, logprobs=k``), which are the full-vocabulary
log-softmax at the answer position (vLLM's and our server's raw log-probs). A label outside the top
``k`` gets the smallest of the k values (an upper bound on its log-probability) and is counted in
``missing``: the restricted distribution is exact only when every label is among the top k, so ask
for as many as the server allows (OpenAI: 5, ``toolbox serve``: 5, vLLM: ``--max-logprobs``, 20 by
default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from toolbox.decision.backends.base import DecisionBackend, Encoded


class HTTPDecisionBackend(DecisionBackend):
    """Label log-probs from a server's top-k log-probs.

    Args:
        engine: an ``HTTPEngine`` (``toolbox.serving.engines.http_engine``) with the model's tokenizer.
        top_logprobs: k, the alternatives asked for per prompt.
    """

    name = "http"

    def __init__(self, engine: Any, top_logprobs: int = 5) -> None:
        if engine.tokenizer is None:
            raise ValueError(
                "the http decision backend needs the model's tokenizer (engine.path) to render prompts "
                "and find the label tokens"
            )
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.top_logprobs = max(1, top_logprobs)
        self.missing = 0  # labels not among the top k (given the floor)
        self.read = 0

    def label_logprobs(
        self, prompts: Sequence[Encoded], label_ids: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        from toolbox.serving.engine import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=self.top_logprobs)
        outputs = self.engine.generate([list(p.ids) for p in prompts], params)
        out = []
        for output, ids in zip(outputs, label_ids, strict=True):
            steps = output.completions[0].top_logprobs or [{}]
            top = steps[0]
            if not top:
                raise ValueError(
                    "the server returned no top log-probs; it must support logprobs on /completions"
                )
            floor = min(top.values())
            values = []
            for t in ids:
                self.read += 1
                if t in top:
                    values.append(top[t])
                else:
                    self.missing += 1
                    values.append(floor)
            out.append(torch.tensor(values, dtype=torch.float64))
        return out
