"""The backend interface: label-token log-probabilities at the answer position, nothing more.

A backend is given encoded prompts (text and token ids) and, for each, the token ids of the answer
labels; it returns ``log p(label | prompt)`` for those ids, taken from the full-vocabulary
log-softmax at the prompt's last position (float64 tensors ``[K]``). Everything else (rotations,
priors, calibration) is the reader's. ``score_groups`` scores prompts that share a prefix; a backend
that can prefill the prefix once overrides it (``shares_prefix = True``). ``hidden_states`` is
for the L2 head, where a backend can give them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Encoded:
    """A prompt as text and as the token ids the model reads (no special tokens added)."""

    text: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Group:
    """Prompts sharing ``prefix`` (token ids); ``suffixes[j]`` completes prompt j (exact tokenization)."""

    prefix: Encoded
    suffixes: tuple[Encoded, ...]
    label_ids: tuple[tuple[int, ...], ...]  # per suffix


class DecisionBackend(ABC):
    """Scores label tokens at the answer position."""

    tokenizer: Any
    name: str = "backend"
    shares_prefix: bool = False

    @abstractmethod
    def label_logprobs(
        self, prompts: Sequence[Encoded], label_ids: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        """``log p(t | prompt_i)`` for every ``t`` in ``label_ids[i]``: float64 ``[K_i]`` per prompt."""

    def score_groups(self, groups: Sequence[Group]) -> list[list[torch.Tensor]]:
        """Per group, per suffix: as ``label_logprobs`` on prefix + suffix (default: exactly that)."""
        prompts, ids = [], []
        for g in groups:
            for s, lab in zip(g.suffixes, g.label_ids, strict=True):
                prompts.append(Encoded(g.prefix.text + s.text, g.prefix.ids + s.ids))
                ids.append(lab)
        flat = iter(self.label_logprobs(prompts, ids))
        return [[next(flat) for _ in g.suffixes] for g in groups]

    @property
    def num_layers(self) -> int:
        raise NotImplementedError(
            f"backend {self.name} exposes no hidden states (L2 needs the torch or hf backend)"
        )

    def hidden_states(self, prompts: Sequence[Encoded], layers: Sequence[int]) -> torch.Tensor:
        """``[N, len(layers), H]`` hidden states at the last position (layer 0: the embeddings;
        ``num_layers``: after the final norm, what the head reads)."""
        raise NotImplementedError(
            f"backend {self.name} exposes no hidden states (L2 needs the torch or hf backend)"
        )
