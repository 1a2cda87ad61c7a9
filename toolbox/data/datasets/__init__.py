"""Dataset factories (``DATASETS``): ``factory(records) -> list[Example]``, the tokenizer injected.

Every example is a dict of token-id lists and masks, plus the raw fields evaluators read
(``prompt``, ``completion``, ``answer`` when the record has them):

==================== ===========================================================================
factory              example keys
==================== ===========================================================================
lm_text              input_ids (bos text eos), completion_mask (all 1)
prompt_completion    input_ids (bos prompt completion eos), completion_mask (1 on completion+eos),
                     prompt_ids (bos prompt)
chat                 input_ids (the chat template), completion_mask (1 on assistant turns),
                     prompt_ids (everything before the last assistant turn's text), loss_weights
                     (per token, only with last_turn_weight != 1)
preference           prompt_ids (bos prompt), chosen_ids, rejected_ids (each ending in eos)
unpaired_preference  prompt_ids (bos prompt), completion_ids (ending in eos), label (bool: desirable)
prompt_only          prompt_ids (bos prompt) and every field of the record
graphs               PyG graphs (``toolbox.data.graphs``), through PyG transforms / the link split
==================== ===========================================================================

``input_ids``/``completion_mask`` examples are batched by the ``pad`` and ``packing`` collators;
``preference`` and ``unpaired_preference`` examples by the collators of the same names.
"""

from toolbox.data.datasets import (  # noqa: F401  (registers the factories)
    chat,
    features,
    graphs,
    lm_text,
    preference,
    prompt_completion,
    prompt_only,
    unpaired_preference,
)
