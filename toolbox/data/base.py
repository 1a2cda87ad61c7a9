"""The data contracts: a source gives raw records, a dataset factory tokenizes them, a collator
batches them.

- A *source* (``SOURCES``) returns ``Splits``: raw records (dicts of plain values) for train and test,
  plus data facts a model may need (``num_classes``, ``in_dim``).
- A *dataset factory* (``DATASETS``) is built with the tokenizer injected; ``factory(records)``
  returns a list of examples (dicts of token-id lists, masks and any kept raw fields).
- A *collator* (``COLLATORS``) turns a list of examples into a dict of tensors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]
Example = dict[str, Any]


@dataclass
class Splits:
    train: Sequence[Record]
    test: Sequence[Record]
    facts: dict[str, Any] = field(default_factory=dict)

    def texts(self) -> Iterator[str]:
        """Every string of every training record: the corpus a tokenizer is trained on."""
        for record in self.train:
            yield from _strings(record)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


class DatasetFactory(ABC):
    """Turns raw records into tokenized examples."""

    @abstractmethod
    def __call__(self, records: Sequence[Record]) -> list[Example]: ...
