"""Right padding: one example per row, as long as the longest example of the batch.

Batch keys (all ``[batch, length]`` tensors):

- ``input_ids`` (long): the tokens, then ``tokenizer.pad_token_id``;
- ``attention_mask`` (long): 1 on the example's tokens, 0 on padding (taken from the lengths,
  so a pad id that equals eos is handled);
- ``completion_mask`` (long): the example's mask (all ones when it has none), 0 on padding;
- ``loss_weights`` (float32), only when an example has them (the chat dataset's
  ``last_turn_weight``): each token's loss weight (1.0 for an example without), 0.0 on padding.

A model forward receives ``input_ids`` and ``attention_mask``; positions default to 0, 1, ...
which is right for right padding. The loss reads ``completion_mask``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS
from toolbox.data.base import Example


@COLLATORS.register("pad")
class PadCollator:
    """Right-pad each batch to its longest example (training and scoring batches).

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the padding.
        pad_to_multiple_of: round the batch length up to a multiple of this (null: no rounding).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, pad_to_multiple_of: int | None = None) -> None:
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ConfigError(
                f"data.collator.pad_to_multiple_of: {pad_to_multiple_of}; set a positive integer or null."
            )
        if tokenizer.pad_token_id is None:
            raise DataError("the tokenizer has no pad token; the pretrained tokenizer of toolbox adds one.")
        self.pad_id = tokenizer.pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        if not examples:
            raise DataError("collator 'pad' got an empty batch.")
        if any("input_ids" not in ex for ex in examples):
            raise DataError(
                "collator 'pad' needs examples with input_ids (datasets lm_text, prompt_completion, chat); "
                "preference and prompt_only examples are batched by their trainers."
            )
        length = max(len(ex["input_ids"]) for ex in examples)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        # one tensor from padded Python lists: much cheaper than a tensor copy per row
        pad = self.pad_id
        ids = [ex["input_ids"] + [pad] * (length - len(ex["input_ids"])) for ex in examples]
        lengths = torch.tensor([len(ex["input_ids"]) for ex in examples])
        comp = [list(ex.get("completion_mask", [1] * len(ex["input_ids"]))) for ex in examples]
        comp = [c + [0] * (length - len(c)) for c in comp]
        input_ids = torch.tensor(ids, dtype=torch.long)
        attention_mask = (torch.arange(length) < lengths[:, None]).long()
        completion_mask = torch.tensor(comp, dtype=torch.long)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}
        if any("loss_weights" in ex for ex in examples):
            weights = [list(ex.get("loss_weights", [1.0] * len(ex["input_ids"]))) for ex in examples]
            batch["loss_weights"] = torch.tensor(
                [w + [0.0] * (length - len(w)) for w in weights], dtype=torch.float32
            )
        return batch
