"""``hf``: a transformers causal LM, one left-padded forward per batch (the reference backend)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from toolbox.decision.backends.base import DecisionBackend, Encoded


def _batches(prompts: Sequence[Encoded], batch_size: int) -> list[list[int]]:
    """Prompt indices in batches of similar length (less padding)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].ids))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _left_padded(model: Any, prompts: Sequence[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    t = max(len(p.ids) for p in prompts)
    ids = torch.full((len(prompts), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), t), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, t - len(p.ids) :] = torch.tensor(p.ids, dtype=torch.long)
        mask[r, t - len(p.ids) :] = 1
    device = next(model.parameters()).device
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": position_ids.to(device),
    }


def hidden_states_of(
    model: Any, prompts: Sequence[Encoded], layers: Sequence[int], pad_id: int, batch_size: int
) -> torch.Tensor:
    """``[N, len(layers), H]`` float32 hidden states at the last position of each prompt."""
    n_blocks = int(model.config.num_hidden_layers)
    layers = [n_blocks + 1 + i if i < 0 else i for i in layers]
    out = torch.zeros((len(prompts), len(layers), int(model.config.hidden_size)), dtype=torch.float32)
    with torch.inference_mode():
        for idx in _batches(prompts, batch_size):
            enc = _left_padded(model, [prompts[i] for i in idx], pad_id)
            states = model(**enc, output_hidden_states=True, logits_to_keep=1).hidden_states
            for li, layer in enumerate(layers):
                out[idx, li] = states[layer][:, -1, :].float().cpu()
    return out


class HFDecisionBackend(DecisionBackend):
    """Label log-probs from a transformers causal LM's forward (``logits_to_keep=1``).

    Args:
        model: the causal LM (an ``HFEngine``'s, or any ``*ForCausalLM``).
        tokenizer: its tokenizer.
        batch_size: prompts per forward.
    """

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 32) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.batch_size = max(1, batch_size)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    @classmethod
    def from_engine(cls, engine: Any, batch_size: int | None = None) -> HFDecisionBackend:
        return cls(engine.model, engine.tokenizer, batch_size or getattr(engine, "batch_size", 32))

    def label_logprobs(
        self, prompts: Sequence[Encoded], label_ids: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(prompts)
        with torch.inference_mode():
            for idx in _batches(prompts, self.batch_size):
                enc = _left_padded(self.model, [prompts[i] for i in idx], self.pad_id)
                logits = self.model(**enc, logits_to_keep=1).logits[:, -1, :].float()
                lp = torch.log_softmax(logits, dim=-1)
                for row, i in enumerate(idx):
                    out[i] = lp[row, list(label_ids[i])].double().cpu()
        return out  # type: ignore[return-value]

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def hidden_states(self, prompts: Sequence[Encoded], layers: Sequence[int]) -> torch.Tensor:
        return hidden_states_of(self.model, prompts, layers, self.pad_id, self.batch_size)
