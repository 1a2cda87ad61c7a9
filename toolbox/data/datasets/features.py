"""Feature vectors with integer labels, for classifiers (``mlp_classifier``)."""

from __future__ import annotations

from collections.abc import Sequence

from toolbox.core.errors import DataError
from toolbox.core.registries import DATASETS
from toolbox.data.base import DatasetFactory, Example, Record


@DATASETS.register("features")
class Features(DatasetFactory):
    """Records {x: list of numbers, y: class} → examples {x, y}; no tokenizer needed.

    Args:
        input_field: record field holding the feature vector.
        target_field: record field holding the integer class.
    """

    def __init__(self, input_field: str = "x", target_field: str = "y") -> None:
        self.input_field = input_field
        self.target_field = target_field

    def __call__(self, records: Sequence[Record]) -> list[Example]:
        out = []
        for i, r in enumerate(records):
            if self.input_field not in r or self.target_field not in r:
                raise DataError(
                    f"record {i} lacks '{self.input_field}' or '{self.target_field}': {sorted(r)}."
                )
            out.append({"x": [float(v) for v in r[self.input_field]], "y": int(r[self.target_field])})
        return out
