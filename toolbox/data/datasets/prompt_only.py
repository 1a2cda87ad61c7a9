"""Prompts for reinforcement learning: the policy writes the completion, rewards read the raw fields."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.tokenized import TokenizedFactory


@DATASETS.register("prompt_only")
class PromptOnly(TokenizedFactory):
    """``prompt_ids`` (bos + prompt) plus every field of the record, unchanged (answer, ...).

    A prompt longer than ``max_length`` loses its start (bos stays).

    Args:
        tokenizer: the run's tokenizer (injected).
        max_length: the most prompt tokens (bos included).
        prompt_field: the record field holding the prompt.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, max_length: int = 512, prompt_field: str = "prompt"
    ) -> None:
        super().__init__(tokenizer, max_length)
        self.prompt_field = prompt_field

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            prompt = self.encode(self.text(record, self.prompt_field, i, "prompt_field"))
            prompt_ids = self.left_truncate(prompt, self.max_length)
            examples.append({**record, "prompt_ids": prompt_ids})
        self.report(len(records), "prompt")
        return examples
