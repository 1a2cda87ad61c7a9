"""Collators (``COLLATORS``): ``collator(examples) -> dict[str, torch.Tensor]``, the tokenizer injected.

``pad`` and ``packing`` take examples with ``input_ids`` and ``completion_mask`` (lm_text,
prompt_completion, chat); ``preference`` takes ``preference`` pairs and ``unpaired_preference``
the ``unpaired_preference`` examples (KTO).

- ``pad``: one example per row, right-padded to the longest; ``input_ids``, ``attention_mask``
  (2D, 1 on tokens) and ``completion_mask`` (0 on padding).
- ``packing``: several examples per row; adds ``position_ids`` restarting at 0 per example, and
  ``attention_mask`` becomes a 4D additive float mask that keeps each example to itself.

A model forward receives ``input_ids``, ``attention_mask`` and, when present, ``position_ids``;
the loss reads ``completion_mask`` (1 where the token is a target) and, when the examples carry
them (the chat dataset's ``last_turn_weight``), ``loss_weights`` (float per token, 0.0 on padding).

- ``preference``: ``preference`` examples (prompt_ids, chosen_ids, rejected_ids), chosen rows then
  rejected rows in one right-padded batch, for the preference trainer's single forward.
- ``preference_packed``: the same sequences packed without padding (``packing``'s keys plus
  ``segments``, each token's sequence), for the paired preference objectives.
- ``unpaired_preference``: ``unpaired_preference`` examples (prompt_ids, completion_ids, label), one
  row each, then (for KTO) the mismatched rows prompt i + completion i-1, with ``label`` a bool tensor.
- ``graph``: PyG graphs (``graphs`` examples) into one disjoint graph's tensors (``x``, ``edge_index``,
  ``y``, masks, ``batch``).
"""

from toolbox.data.collators import (  # noqa: F401  (registers the collators)
    graph,
    packing,
    pad,
    preference,
    preference_packed,
    stack,
    unpaired_preference,
)
