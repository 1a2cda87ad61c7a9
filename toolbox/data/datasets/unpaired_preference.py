"""Unpaired preference data: a prompt, one completion and a boolean label (KTO's input).

The records are TRL's unpaired preference format (``{"prompt", "completion", "label"}``): ``label``
is true when the completion is desirable, false when it is undesirable. Nothing pairs the
examples; the ``unpaired_preference`` collator builds KTO's mismatched rows per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import DataError
from toolbox.core.registries import DATASETS
from toolbox.data.base import Example, Record
from toolbox.data.datasets.prompt_completion import PromptCompletion

log = logging.getLogger(__name__)


@DATASETS.register("unpaired_preference")
class UnpairedPreference(PromptCompletion):
    """``prompt_ids`` (bos + prompt), ``completion_ids`` (completion + eos) and ``label`` (a bool).

    ``max_length`` bounds prompt + completion: the prompt loses its start to fit, and an example
    whose completion leaves no room for any prompt token is skipped (one warning per call counts
    them). A label must be a boolean (true: desirable); anything else is a DataError naming the
    record.

    Args:
        tokenizer: the run's tokenizer (injected).
        max_length: the most tokens of prompt + completion.
        prompt_field: the record field holding the prompt.
        completion_field: the record field holding the completion.
        label_field: the record field holding the label (true: desirable, false: undesirable).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int = 512,
        prompt_field: str = "prompt",
        completion_field: str = "completion",
        label_field: str = "label",
    ) -> None:
        super().__init__(tokenizer, max_length, prompt_field, completion_field)
        self.label_field = label_field

    def label(self, record: Record, index: int) -> bool:
        """``record[label_field]`` as a bool; a DataError names the record and the fix otherwise."""
        if self.label_field not in record:
            raise DataError(
                f"record {index} has no field '{self.label_field}' (its keys: {', '.join(map(str, record))}); "
                "set data.dataset.label_field to the field holding the boolean label (true: desirable), "
                "or use paired data (data.dataset.name=preference_pairs) for chosen/rejected records."
            )
        value = record[self.label_field]
        if type(value).__name__ in ("bool", "bool_"):  # a Python or a NumPy bool
            return bool(value)
        raise DataError(
            f"record {index} has a {type(value).__name__} in field '{self.label_field}' ({value!r}); a label "
            "must be a boolean, true for a desirable completion and false for an undesirable one: convert "
            "the data set's labels, or set data.dataset.label_field to the field holding them."
        )

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        self.start()
        examples = []
        for i, record in enumerate(records):
            label = self.label(record, i)
            encoded = self.prompt_and_completion(record, i)
            if encoded is None:
                continue
            prompt_ids, completion = encoded
            examples.append(
                {**self.raw(record), "prompt_ids": prompt_ids, "completion_ids": completion, "label": label}
            )
        self.report(len(records), "completion alone")
        desirable = sum(ex["label"] for ex in examples)
        log.info(
            "dataset 'unpaired_preference': %d desirable and %d undesirable examples.",
            desirable,
            len(examples) - desirable,
        )
        return examples
