"""``torch``: our engine's slot KV cache; the rotations of one state prefill their shared prefix once.

Flat prompts are prefilled in batches (right-padded, at their true positions). A group of prompts
sharing a prefix (the rotations of one state and question) prefills the prefix once into one slot,
copies that slot's keys and values to the group's other rows, and runs only the suffixes (the
option lines and the chat template's tail) after it (``SlotRunner.extend``). The runner is our
torch engine's (``toolbox.serving.engines.torch.SlotRunner``), with a cache of its own: the engine's slots
belong to the requests it is serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from toolbox.decision.backends.base import DecisionBackend, Encoded, Group
from toolbox.decision.backends.hf import hidden_states_of
from toolbox.serving.engines.loading import context_length
from toolbox.serving.engines.torch import SlotRunner


class TorchDecisionBackend(DecisionBackend):
    """Label log-probs through ``SlotRunner`` (prefill, and prefix + ``extend`` for groups).

    Args:
        model: a causal LM the torch engine runs (a ``TorchEngine``'s model, shared).
        tokenizer: its tokenizer.
        max_batch_size: rows (KV-cache slots) per forward.
        max_batch_tokens: padded tokens per flat forward.
        max_model_len: longest prompt (null: the model's context).
        linear: the runner's projections ("auto", "onednn" or "torch"; see ``SlotRunner``).
    """

    name = "torch"
    shares_prefix = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch_size: int = 64,
        max_batch_tokens: int = 16384,
        max_model_len: int | None = None,
        linear: str = "auto",
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_batch_size = max(1, max_batch_size)
        self.max_batch_tokens = max(1, max_batch_tokens)
        length = context_length(model, tokenizer, max_model_len)
        self.runner = SlotRunner(model, self.max_batch_size, length, linear=linear)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    @classmethod
    def from_engine(cls, engine: Any, max_batch_size: int | None = None) -> TorchDecisionBackend:
        """On a ``TorchEngine``'s model (the same weights; its own cache)."""
        linear = "onednn" if engine.runner.onednn else "torch"
        return cls(engine.model, engine.tokenizer, max_batch_size or engine.runner.max_slots, linear=linear)

    def _rows(self, lengths: Sequence[int]) -> list[list[int]]:
        """Batches of row indices (sorted by length) within the slot and token budgets."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:  # ascending: the newest row is the longest
            if current and (
                len(current) >= self.max_batch_size or lengths[i] * (len(current) + 1) > self.max_batch_tokens
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def label_logprobs(
        self, prompts: Sequence[Encoded], label_ids: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(prompts)
        with torch.inference_mode():
            for idx in self._rows([len(p.ids) for p in prompts]):
                logits = self.runner.prefill(list(range(len(idx))), [list(prompts[i].ids) for i in idx])
                lp = torch.log_softmax(logits.float(), dim=-1)
                for row, i in enumerate(idx):
                    out[i] = lp[row, list(label_ids[i])].double().cpu()
        return out  # type: ignore[return-value]

    def score_groups(self, groups: Sequence[Group]) -> list[list[torch.Tensor]]:
        out: list[list[torch.Tensor | None]] = [[None] * len(g.suffixes) for g in groups]
        with torch.inference_mode():
            for chunk in self._group_batches(groups):
                first, rows, starts, suffixes, where = [], [], [], [], []
                for gi in chunk:
                    g = groups[gi]
                    first.append(len(rows))
                    for j, s in enumerate(g.suffixes):
                        rows.append(first[-1])
                        starts.append(len(g.prefix.ids))
                        suffixes.append(list(s.ids))
                        where.append((gi, j))
                self.runner.prefill(first, [list(groups[gi].prefix.ids) for gi in chunk])
                others = [r for r, src in enumerate(rows) if r != src]
                if others:
                    self.runner.copy_slots([rows[r] for r in others], others, max(starts))
                lp = torch.log_softmax(self.runner.extend(suffixes, starts).float(), dim=-1)
                for r, (gi, j) in enumerate(where):
                    out[gi][j] = lp[r, list(groups[gi].label_ids[j])].double().cpu()
        return out  # type: ignore[return-value]

    def _group_batches(self, groups: Sequence[Group]) -> list[list[int]]:
        """Groups per forward: rows (suffixes) within the slots, prefix + suffix tokens within budget."""
        batches, current, rows, tokens = [], [], 0, 0
        for gi, g in enumerate(groups):
            n = len(g.suffixes)
            if n > self.max_batch_size:
                raise ValueError(f"a group of {n} prompts exceeds max_batch_size={self.max_batch_size}")
            cost = n * (len(g.prefix.ids) + max(len(s.ids) for s in g.suffixes))
            if current and (rows + n > self.max_batch_size or tokens + cost > self.max_batch_tokens):
                batches.append(current)
                current, rows, tokens = [], 0, 0
            current.append(gi)
            rows += n
            tokens += cost
        if current:
            batches.append(current)
        return batches

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def hidden_states(self, prompts: Sequence[Encoded], layers: Sequence[int]) -> torch.Tensor:
        return hidden_states_of(self.model, prompts, layers, self.pad_id, self.max_batch_size)
