"""Collators (``COLLATORS``): ``collator(examples) -> dict[str, torch.Tensor]``, the tokenizer injected.

Both take examples with ``input_ids`` and ``completion_mask`` (lm_text, prompt_completion, chat).

- ``pad``: one example per row, right-padded to the longest; ``input_ids``, ``attention_mask``
  (2D, 1 on tokens) and ``completion_mask`` (0 on padding).
- ``packing``: several examples per row; adds ``position_ids`` restarting at 0 per example, and
  ``attention_mask`` becomes a 4D additive float mask that keeps each example to itself.

A model forward receives ``input_ids``, ``attention_mask`` and, when present, ``position_ids``;
the loss reads ``completion_mask`` (1 where the token is a target).
"""

from toolbox.data.collators import packing, pad  # noqa: F401  (registers the collators)
