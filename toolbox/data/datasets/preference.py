"""Preference pairs: a prompt with a chosen and a rejected completion (DPO and kin)."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.tokenized import TokenizedFactory


@DATASETS.register("preference_pairs")
class Preference(TokenizedFactory):
    """``prompt_ids`` (bos + prompt), ``chosen_ids`` and ``rejected_ids`` (each ending in eos).

    ``max_length`` bounds prompt + the longer completion: the prompt loses its start to fit, and a
    pair whose longer completion leaves no room for any prompt token is skipped (one warning per
    call counts them).

    Args:
        tokenizer: the run's tokenizer (injected).
        max_length: the most tokens of prompt + either completion.
        prompt_field: the record field holding the prompt.
        chosen_field: the record field holding the preferred completion.
        rejected_field: the record field holding the dispreferred completion.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int = 512,
        prompt_field: str = "prompt",
        chosen_field: str = "chosen",
        rejected_field: str = "rejected",
    ) -> None:
        super().__init__(tokenizer, max_length)
        self.prompt_field = prompt_field
        self.chosen_field = chosen_field
        self.rejected_field = rejected_field

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            prompt = self.encode(self.text(record, self.prompt_field, i, "prompt_field"))
            chosen = [*self.encode(self.text(record, self.chosen_field, i, "chosen_field")), self.eos]
            rejected = [*self.encode(self.text(record, self.rejected_field, i, "rejected_field")), self.eos]
            prompt_ids = self.left_truncate(prompt, self.max_length - max(len(chosen), len(rejected)))
            if prompt_ids is None:
                self.num_skipped += 1
                continue
            examples.append(
                {**self.raw(record), "prompt_ids": prompt_ids, "chosen_ids": chosen, "rejected_ids": rejected}
            )
        self.report(len(records), "longer completion")
        return examples
