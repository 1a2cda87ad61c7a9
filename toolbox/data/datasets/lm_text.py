"""Plain language modelling: every token of a text is a target."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.tokenized import TokenizedFactory


@DATASETS.register("lm_text")
class LMText(TokenizedFactory):
    """bos + text + eos, every token scored (``completion_mask`` all ones).

    A text longer than ``max_length`` is cut at ``max_length`` tokens (it then has no eos).

    Args:
        tokenizer: the run's tokenizer (injected).
        field: the record field holding the text.
        max_length: the most tokens an example keeps.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, field: str = "text", max_length: int = 512
    ) -> None:
        super().__init__(tokenizer, max_length)
        self.field = field

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            ids = [*self.bos, *self.encode(self.text(record, self.field, i, "field")), self.eos]
            if len(ids) > self.max_length:
                self.num_truncated += 1
                ids = ids[: self.max_length]
            examples.append({**self.raw(record), "input_ids": ids, "completion_mask": [1] * len(ids)})
        self.report(len(records), "text")
        return examples
