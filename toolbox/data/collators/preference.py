"""Preference pairs, concatenated: chosen rows, then rejected rows, in one right-padded batch.

Takes ``preference`` examples (``prompt_ids``, ``chosen_ids``, ``rejected_ids``) and returns, for
``B`` pairs, ``R = 2B`` rows (``3B`` with ``mismatched``) of length ``L``:

- ``input_ids`` (long ``[R, L]``): rows ``0..B-1`` are prompt + chosen, rows ``B..2B-1`` prompt +
  rejected, then ``tokenizer.pad_token_id``;
- ``attention_mask`` (long ``[R, L]``): 1 on tokens, 0 on padding;
- ``completion_mask`` (long ``[R, L]``): 1 on the completion's tokens (eos included);
- ``ref_chosen_logps`` / ``ref_rejected_logps`` (float ``[B]``): when every example carries its
  precomputed reference log-probs;
- ``num_pairs``: ``B`` (an int).

With ``mismatched`` (the setting, or the preference trainer's per-call argument for KTO), rows ``2B..3B-1`` pair prompt ``i``
with the chosen completion of pair ``i+1`` (mod B): KTO's KL reference point is estimated on them.
One forward over all rows gives every log-prob a preference loss needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS
from toolbox.data.base import Example


class PromptCompletionRows:
    """What the preference collators share: the pad token and rounding, and the packing of
    (prompt ids, completion ids) rows into one right-padded batch.

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the padding.
        pad_to_multiple_of: round the batch length up to a multiple of this (null: no rounding).
        mismatched: add KTO's mismatched rows (the preference trainer asks per call).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        pad_to_multiple_of: int | None = None,
        mismatched: bool = False,
    ) -> None:
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ConfigError(
                f"data.collator.pad_to_multiple_of: {pad_to_multiple_of}; set a positive integer or null."
            )
        if tokenizer.pad_token_id is None:
            raise DataError("the tokenizer has no pad token; the pretrained tokenizer of toolbox adds one.")
        self.pad_id = tokenizer.pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.mismatched = mismatched

    def pack(self, rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask`` and ``completion_mask`` (long ``[len(rows), L]``)."""
        length = max(len(p) + len(c) for p, c in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        # one tensor from padded Python lists: much cheaper than three tensor copies per row
        pad = self.pad_id
        ids, completion, lengths = [], [], []
        for prompt, answer in rows:
            p, n = len(prompt), len(prompt) + len(answer)
            ids.append([*prompt, *answer, *[pad] * (length - n)])
            completion.append([0] * p + [1] * (n - p) + [0] * (length - n))
            lengths.append(n)
        input_ids = torch.tensor(ids, dtype=torch.long)
        attention_mask = (torch.arange(length) < torch.tensor(lengths)[:, None]).long()
        completion_mask = torch.tensor(completion, dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}


@COLLATORS.register("preference_pad")
class PreferenceCollator(PromptCompletionRows):
    """Chosen and rejected sequences of each pair in one batch (the preference trainer's input).

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the padding.
        pad_to_multiple_of: round the batch length up to a multiple of this (null: no rounding).
        mismatched: add prompt i + chosen completion of pair i+1 rows (KTO's KL estimate).
    """

    def __call__(
        self, examples: Sequence[Example], mismatched: bool | None = None
    ) -> dict[str, torch.Tensor | int]:
        """The batch of ``examples``; ``mismatched`` (the trainer's, for KTO) overrides the setting."""
        if not examples:
            raise DataError("collator 'preference_pad' got an empty batch.")
        if any(k not in ex for ex in examples for k in ("prompt_ids", "chosen_ids", "rejected_ids")):
            unpaired = all("completion_ids" in ex and "label" in ex for ex in examples)
            hint = (
                " These are unpaired examples: use data.collator.name=unpaired_preference_pad."
                if unpaired
                else ""
            )
            raise DataError(
                "collator 'preference_pad' needs examples with prompt_ids, chosen_ids and rejected_ids "
                f"(data.dataset.name=preference_pairs).{hint}"
            )
        b = len(examples)
        rows = [(ex["prompt_ids"], ex["chosen_ids"]) for ex in examples]
        rows += [(ex["prompt_ids"], ex["rejected_ids"]) for ex in examples]
        if self.mismatched if mismatched is None else mismatched:
            rows += [(examples[i]["prompt_ids"], examples[(i + 1) % b]["chosen_ids"]) for i in range(b)]
        batch: dict[str, torch.Tensor | int] = {**self.pack(rows), "num_pairs": b}
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if all(key in ex for ex in examples):
                batch[key] = torch.tensor([float(ex[key]) for ex in examples], dtype=torch.float32)
        return batch
