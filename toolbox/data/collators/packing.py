"""Packing: several examples share a row, and attention keeps each example to itself.

Examples are placed greedily, in order, into the first row with room (first fit); the batch is as
long as its fullest row (at most ``max_length``) and may have fewer rows than examples.

Batch keys, for ``R`` rows of ``L`` tokens:

- ``input_ids`` (long ``[R, L]``): the examples back to back, then ``tokenizer.pad_token_id``;
- ``position_ids`` (long ``[R, L]``): 0, 1, ... restarting at every example (and for the padding);
- ``attention_mask`` (float32 ``[R, 1, L, L]``): additive, 0.0 where query ``i`` may attend key ``j``
  (same example, ``j <= i``) and ``torch.finfo(torch.float32).min`` elsewhere. The padding at a
  row's end is treated as one more sequence, so no query row is fully masked (no NaN);
- ``completion_mask`` (long ``[R, L]``): each example's mask, 0 on padding and on each example's
  first token (in a packed row that token would otherwise be "predicted" from the previous
  example; alone it is never a target), so the summed loss equals that of the examples run apart.

A model forward receives ``input_ids``, ``attention_mask`` and ``position_ids``; the loss reads
``completion_mask`` (a 4D ``attention_mask`` marks no padding: use ``completion_mask``).

Why this form: transformers (5.x) hands a 4D mask to the attention unchanged. ``sdpa`` accepts a
boolean or an additive float mask, ``eager`` adds the mask to the scores, so only the additive
float mask works with both (the tests check each packed example's logits against the example
run alone, for both implementations; a bfloat16 model takes the float32 mask as well).
The alternative, ``position_ids`` with no ``attention_mask``, is detected as packing only when the
model runs without a cache (``use_cache=False``), which training code does not always set.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS
from toolbox.data.base import Example

BLOCKED = torch.finfo(torch.float32).min


@COLLATORS.register("packing")
class PackingCollator:
    """Pack several examples into each row of up to ``max_length`` tokens, attention kept apart.

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the rows' ends.
        max_length: the most tokens of a row; no example may be longer (set data.dataset.max_length
            no larger).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int = 512) -> None:
        if max_length < 1:
            raise ConfigError(f"data.collator.max_length: {max_length}; set a positive integer.")
        if tokenizer.pad_token_id is None:
            raise DataError("the tokenizer has no pad token; the pretrained tokenizer of toolbox adds one.")
        self.pad_id = tokenizer.pad_token_id
        self.max_length = max_length

    def rows(self, lengths: Sequence[int]) -> list[list[int]]:
        """First-fit placement: the example indices of each row, in order."""
        rows: list[list[int]] = []
        room: list[int] = []
        for i, n in enumerate(lengths):
            if n > self.max_length:
                raise DataError(
                    f"collator 'packing': an example has {n} tokens, more than data.collator.max_length="
                    f"{self.max_length}; set data.dataset.max_length <= data.collator.max_length."
                )
            for r in range(len(rows)):
                if room[r] >= n:
                    rows[r].append(i)
                    room[r] -= n
                    break
            else:
                rows.append([i])
                room.append(self.max_length - n)
        return rows

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        if not examples:
            raise DataError("collator 'packing' got an empty batch.")
        if any("input_ids" not in ex for ex in examples):
            raise DataError(
                "collator 'packing' needs examples with input_ids (datasets lm_text, prompt_completion, chat)."
            )
        rows = self.rows([len(ex["input_ids"]) for ex in examples])
        length = max(sum(len(examples[i]["input_ids"]) for i in row) for row in rows)
        weighted = any("loss_weights" in ex for ex in examples)
        # each tensor from one list of rows (a tensor copy per example costs far more)
        ids_rows, position_rows, completion_rows, sequence_rows, weight_rows = [], [], [], [], []
        for row in rows:
            ids, positions, completion, sequence, weights = [], [], [], [], []
            for k, i in enumerate(row):
                example = examples[i]
                n = len(example["input_ids"])
                ids += example["input_ids"]
                positions += range(n)
                if n:  # the first token is never a target
                    completion += [0, *list(example.get("completion_mask", [1] * n))[1:]]
                sequence += [k] * n  # which sequence of its row a token belongs to
                if weighted:
                    weights += example.get("loss_weights", [1.0] * n)
            room = length - len(ids)
            ids_rows.append(ids + [self.pad_id] * room)
            position_rows.append(positions + list(range(room)))
            completion_rows.append(completion + [0] * room)
            sequence_rows.append(sequence + [len(row)] * room)
            weight_rows.append(weights + [0.0] * room)
        input_ids = torch.tensor(ids_rows, dtype=torch.long)
        position_ids = torch.tensor(position_rows, dtype=torch.long)
        completion_mask = torch.tensor(completion_rows, dtype=torch.long)
        sequence = torch.tensor(sequence_rows, dtype=torch.long)
        weights = torch.tensor(weight_rows, dtype=torch.float32) if weighted else None
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        allowed = (sequence[:, :, None] == sequence[:, None, :]) & causal
        attention_mask = torch.zeros((len(rows), 1, length, length), dtype=torch.float32)
        attention_mask.masked_fill_(~allowed[:, None], BLOCKED)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "completion_mask": completion_mask,
        }
        if weights is not None:
            batch["loss_weights"] = weights
        return batch
