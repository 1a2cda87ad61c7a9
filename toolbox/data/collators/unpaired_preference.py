"""Unpaired preference examples (KTO): the examples' rows, then KTO's mismatched rows, in one batch.

Takes ``unpaired_preference`` examples (``prompt_ids``, ``completion_ids``, ``label``) and returns,
for ``B`` examples, ``R = B`` rows (``2B`` with ``mismatched``) of length ``L``:

- ``input_ids`` (long ``[R, L]``): rows ``0..B-1`` are prompt + completion of each example, then
  ``tokenizer.pad_token_id``;
- ``attention_mask`` (long ``[R, L]``): 1 on tokens, 0 on padding;
- ``completion_mask`` (long ``[R, L]``): 1 on the completion's tokens (eos included);
- ``label`` (bool ``[B]``): true where the example's completion is desirable;
- ``ref_logps`` (float ``[B]``): when every example carries its precomputed reference log-prob;
- ``num_examples``: ``B`` (an int).

With ``mismatched`` (the setting, or the preference trainer's per-call argument for KTO), rows ``B..2B-1`` pair prompt ``i``
with the completion of example ``i-1`` (mod B), whatever the labels: KTO's KL reference point is
estimated on them. This is TRL 1.16's rotation (``KTOTrainer._prepare_dataset`` sets
``KL_completion_ids = [completion_ids[-1]] + completion_ids[:-1]`` within each batch:
``(x_1, y_B), (x_2, y_1), ..., (x_B, y_{B-1})``), built here per batch because our loader shuffles.
A mismatched row is not truncated, so it can exceed ``data.dataset.max_length`` by the difference of
two completions' lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from toolbox.core.errors import DataError
from toolbox.core.registries import COLLATORS
from toolbox.data.base import Example
from toolbox.data.collators.preference import PromptCompletionRows

KEYS = ("prompt_ids", "completion_ids", "label")


@COLLATORS.register("unpaired_preference_pad")
class UnpairedPreferenceCollator(PromptCompletionRows):
    """Each example's row and (for KTO) its mismatched row in one batch (the preference trainer's input).

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the padding.
        pad_to_multiple_of: round the batch length up to a multiple of this (null: no rounding).
        mismatched: add prompt i + completion of example i-1 rows (KTO's KL estimate).
    """

    def __call__(
        self, examples: Sequence[Example], mismatched: bool | None = None
    ) -> dict[str, torch.Tensor | int]:
        """The batch of ``examples``; ``mismatched`` (the trainer's, for KTO) overrides the setting."""
        if not examples:
            raise DataError("collator 'unpaired_preference_pad' got an empty batch.")
        for i, ex in enumerate(examples):
            missing = [k for k in KEYS if k not in ex]
            if missing:
                hint = (
                    " These are chosen/rejected pairs: use data.collator.name=preference_pad."
                    if "chosen_ids" in ex
                    else ""
                )
                raise DataError(
                    f"collator 'unpaired_preference_pad': example {i} has no {', '.join(missing)} (its keys: "
                    f"{', '.join(map(str, ex))}); it needs examples with prompt_ids, completion_ids and "
                    f"a boolean label (data.dataset.name=unpaired_preference).{hint}"
                )
            if not isinstance(ex["label"], bool):
                raise DataError(
                    f"collator 'unpaired_preference_pad': example {i} has the label {ex['label']!r}; a label must "
                    "be true (desirable) or false (undesirable) (data.dataset.name=unpaired_preference)."
                )
        b = len(examples)
        rows = [(ex["prompt_ids"], ex["completion_ids"]) for ex in examples]
        if self.mismatched if mismatched is None else mismatched:
            rows += [(examples[i]["prompt_ids"], examples[(i - 1) % b]["completion_ids"]) for i in range(b)]
        batch: dict[str, torch.Tensor | int] = {
            **self.pack(rows),
            "label": torch.tensor([ex["label"] for ex in examples], dtype=torch.bool),
            "num_examples": b,
        }
        if all("ref_logps" in ex for ex in examples):
            batch["ref_logps"] = torch.tensor(
                [float(ex["ref_logps"]) for ex in examples], dtype=torch.float32
            )
        return batch
