"""Prompt → completion pairs, scored on the completion only."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.tokenized import TokenizedFactory


@DATASETS.register("prompt_completion")
class PromptCompletion(TokenizedFactory):
    """bos + prompt + completion + eos; ``completion_mask`` is 1 on the completion and eos.

    Prompt and completion are tokenized apart, as at generation time (the model sees the prompt's
    tokens and produces the completion's). Too long an example loses the start of its prompt
    (bos stays); one whose completion leaves no room for any prompt token is skipped, with one
    warning per call counting them. ``prompt_ids`` (bos + prompt) is what generation starts from.

    Args:
        tokenizer: the run's tokenizer (injected).
        max_length: the most tokens an example has.
        prompt_field: the record field holding the prompt.
        completion_field: the record field holding the completion.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int = 512,
        prompt_field: str = "prompt",
        completion_field: str = "completion",
    ) -> None:
        super().__init__(tokenizer, max_length)
        self.prompt_field = prompt_field
        self.completion_field = completion_field

    def prompt_and_completion(self, record: Record, index: int) -> tuple[list[int], list[int]] | None:
        """(bos + prompt, completion + eos) of a record, the prompt left-truncated to fit
        ``max_length``; None (counted as skipped) when the completion leaves no room for it."""
        prompt = self.encode(self.text(record, self.prompt_field, index, "prompt_field"))
        completion = [
            *self.encode(self.text(record, self.completion_field, index, "completion_field")),
            self.eos,
        ]
        prompt_ids = self.left_truncate(prompt, self.max_length - len(completion))
        if prompt_ids is None:
            self.num_skipped += 1
            return None
        return prompt_ids, completion

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            encoded = self.prompt_and_completion(record, i)
            if encoded is None:
                continue
            prompt_ids, completion = encoded
            examples.append(
                {
                    **self.raw(record),
                    "input_ids": [*prompt_ids, *completion],
                    "completion_mask": [0] * len(prompt_ids) + [1] * len(completion),
                    "prompt_ids": prompt_ids,
                }
            )
        self.report(len(records), "completion alone")
        return examples
