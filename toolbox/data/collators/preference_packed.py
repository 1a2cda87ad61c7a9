"""``preference_packed``: the preference batch without padding. The 2B sequences (prompt + chosen,
then prompt + rejected) are packed into rows by the ``packing`` collator (position ids restarting
per sequence, attention kept to each sequence), and ``segments`` says which sequence each token
belongs to, so the per-sequence log-prob sums come out in ``preference``'s row order.

Batch keys: ``packing``'s (``input_ids``, 4D ``attention_mask``, ``position_ids``,
``completion_mask``), ``segments`` (long ``[R, L]``: the sequence index, -1 on padding),
``num_sequences`` (2B), ``num_pairs`` (B), ``num_tokens`` (the non-padding tokens), and the precomputed ``ref_*_logps`` when every pair has them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS
from toolbox.data.base import Example
from toolbox.data.collators.packing import PackingCollator


@COLLATORS.register("preference_packed")
class PackedPreferenceCollator:
    """Chosen and rejected sequences of each pair packed into rows of up to ``max_length`` tokens.

    Args:
        tokenizer: the run's tokenizer (injected); its pad token fills the rows' ends.
        max_length: the most tokens of a row; no prompt + completion may be longer.
        mismatched: KTO's mismatched rows are not packed; must stay false.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, max_length: int = 512, mismatched: bool = False
    ) -> None:
        if mismatched:
            raise ConfigError(
                "data.collator.name=preference_packed does not pack KTO's mismatched rows; "
                "use data.collator.name=preference_pad."
            )
        self.packer = PackingCollator(tokenizer, max_length)

    def __call__(
        self, examples: Sequence[Example], mismatched: bool | None = None
    ) -> dict[str, torch.Tensor | int]:
        if mismatched:
            raise ConfigError(
                "data.collator.name=preference_packed does not pack KTO's mismatched rows; "
                "use data.collator.name=preference_pad."
            )
        if not examples:
            raise DataError("collator 'preference_packed' got an empty batch.")
        if any(k not in ex for ex in examples for k in ("prompt_ids", "chosen_ids", "rejected_ids")):
            raise DataError(
                "collator 'preference_packed' needs examples with prompt_ids, chosen_ids and rejected_ids "
                "(data.dataset.name=preference_pairs)."
            )
        pairs = [(ex["prompt_ids"], ex["chosen_ids"]) for ex in examples]
        pairs += [(ex["prompt_ids"], ex["rejected_ids"]) for ex in examples]
        sequences = [
            {"input_ids": [*p, *c], "completion_mask": [0] * len(p) + [1] * len(c)} for p, c in pairs
        ]
        batch: dict[str, torch.Tensor | int] = dict(self.packer(sequences))
        length = batch["input_ids"].shape[1]
        rows = []
        for row in self.packer.rows([len(s["input_ids"]) for s in sequences]):
            segment = [i for i in row for _ in range(len(sequences[i]["input_ids"]))]
            rows.append(segment + [-1] * (length - len(segment)))
        segments = torch.tensor(rows, dtype=torch.long)
        tokens = int((segments >= 0).sum())
        batch.update(
            segments=segments, num_sequences=len(sequences), num_pairs=len(examples), num_tokens=tokens
        )
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if all(key in ex for ex in examples):
                batch[key] = torch.tensor([float(ex[key]) for ex in examples], dtype=torch.float32)
        return batch
