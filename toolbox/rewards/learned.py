"""A learned reward: a sequence-classification transformers model scores prompt + completion.

Train one with the preference trainer and the Bradley–Terry objective on preference pairs::

    toolbox train model=reward_model objective=bradley_terry trainer=preference data=arithmetic_pairs

(``model=reward_model`` builds a tiny ``LlamaForSequenceClassification`` with one output, or loads
one from ``path``). Then score with ``{name: learned, path: results/<run>/model}``. The sequence
is tokenized exactly as the preference data set does it: bos + prompt + completion + eos, prompt
and completion encoded apart; the score is the model's output at the last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from toolbox.core.registries import MODELS, REWARDS
from toolbox.rewards.base import Reward


@MODELS.register("reward_model")
def reward_model(
    vocab_size: int | None = None,
    path: str | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 256,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> nn.Module:
    """A sequence classifier with one output (a scalar reward per sequence).

    With ``path``: ``AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)``, e.g.
    from an SFT model (the score head is new). Without: a tiny ``LlamaForSequenceClassification``
    with random weights (head size ``hidden_size / num_heads`` >= 32, as for tiny_llama).

    Args:
        vocab_size: number of token ids; injected from the tokenizer.
        path: a saved model to start from (null: random init from the sizes below).
        hidden_size: model width.
        num_layers: number of decoder layers.
        num_heads: attention heads.
        intermediate_size: inner width of the feed-forward.
        max_position_embeddings: longest sequence the model is configured for.
        pad_token_id: id of the padding token; injected (the score is read at the last non-pad token).
        bos_token_id: injected from the tokenizer.
        eos_token_id: injected from the tokenizer.
    """
    if path:
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        if model.config.pad_token_id is None and pad_token_id is not None:
            model.config.pad_token_id = pad_token_id
        return model
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from toolbox.nn.models.head_sizes import check_heads

    if vocab_size is None:
        from toolbox.core.errors import ConfigError

        raise ConfigError(
            "model 'reward_model' needs vocab_size (injected from the tokenizer) or model.path."
        )
    check_heads(hidden_size, num_heads, None)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        num_labels=1,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )
    return LlamaForSequenceClassification(config)


def sequence_ids(tokenizer: Any, prompt: str, completion: str) -> list[int]:
    """bos + prompt + completion + eos, prompt and completion encoded apart (as the data sets do)."""
    bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
    eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    return [
        *bos,
        *tokenizer.encode(prompt, add_special_tokens=False),
        *tokenizer.encode(completion, add_special_tokens=False),
        *eos,
    ]


@torch.no_grad()
def score_sequences(
    model: nn.Module,
    sequences: Sequence[Sequence[int]],
    pad_token_id: int,
    batch_size: int = 64,
    device: Any = None,
) -> list[float]:
    """The classifier's scalar output for each token sequence (right-padded batches)."""
    device = device or next(model.parameters()).device
    scores: list[float] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start : start + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(chunk):
            ids[r, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
            mask[r, : len(s)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        scores.extend(logits[:, 0].float().tolist())
    return scores


@REWARDS.register("learned")
class LearnedReward(Reward):
    """The score of a trained reward model (``AutoModelForSequenceClassification``, one output).

    Args:
        path: folder with the model and its tokenizer (a run's ``model`` folder).
        batch_size: sequences scored per forward pass.
        scale: multiply the raw score by this.
        shift: then add this (e.g. minus the mean score on reference data).
        device: cpu, cuda or auto.
        model: in code, an already loaded classifier (instead of path).
        tokenizer: in code, its tokenizer (instead of path).
    """

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 64,
        scale: float = 1.0,
        shift: float = 0.0,
        device: str = "cpu",
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        if model is None or tokenizer is None:
            if not path:
                from toolbox.core.errors import ConfigError

                raise ConfigError(
                    "reward 'learned' needs reward.path (a folder with the model and tokenizer)."
                )
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            model = model or AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.scale = scale
        self.shift = shift
        self.device = device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.pad_id

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], **fields: Any
    ) -> list[float | None]:
        seqs = [sequence_ids(self.tokenizer, str(p), c) for p, c in zip(prompts, completions, strict=True)]
        raw = score_sequences(self.model, seqs, self.pad_id, self.batch_size, self.device)
        return [self.scale * s + self.shift for s in raw]
