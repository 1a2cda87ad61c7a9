"""``anyjev``: an AnyJev backend (``anyjev.backends.hf.HFBackend``, its vLLM backend, ...) behind ours.

AnyJev's backends take rendered prompt texts and the label token ids and return
``log p(label | prompt)`` (its ``next_token_logprobs``), which is our interface on text. The reader
stays ours (prompts, rotations, priors, levels); the forward is AnyJev's. ``anyjev`` is optional.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from toolbox.decision.backends.base import DecisionBackend, Encoded


class AnyJevBackend(DecisionBackend):
    """Label log-probs through an AnyJev backend object.

    Args:
        backend: an AnyJev backend (has ``tokenizer`` and ``next_token_logprobs(texts, token_ids)``).
    """

    name = "anyjev"

    def __init__(self, backend: Any) -> None:
        if not hasattr(backend, "next_token_logprobs"):
            raise TypeError(f"{type(backend).__name__} is not an AnyJev backend (no next_token_logprobs)")
        self.backend, self.tokenizer = backend, backend.tokenizer

    @classmethod
    def hf(
        cls, path: str, device: str = "cpu", dtype: str = "float32", batch_size: int = 16
    ) -> AnyJevBackend:
        """AnyJev's transformers backend on a local model folder."""
        try:
            from anyjev.backends.hf import HFBackend
        except ImportError as e:
            raise ImportError("the anyjev decision backend needs `pip install anyjev` (0.3.0)") from e
        return cls(HFBackend(path, device=device, dtype=dtype, batch_size=batch_size))

    def label_logprobs(
        self, prompts: Sequence[Encoded], label_ids: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        lps = self.backend.next_token_logprobs([p.text for p in prompts], [list(i) for i in label_ids])
        return [torch.as_tensor(lp, dtype=torch.float64) for lp in lps]

    @property
    def num_layers(self) -> int:
        return int(self.backend.n_layers)
