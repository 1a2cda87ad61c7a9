"""``planetoid``: the Planetoid citation graphs (Cora, CiteSeer, PubMed) from a local root, or downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.graphs import node_splits

NAMES = ("Cora", "CiteSeer", "PubMed")


@SOURCES.register("planetoid")
def planetoid(
    dataset: str = "Cora",
    root: str = "../shared/data/planetoid",
    split: Literal["public", "full"] = "public",
    download: bool = True,
) -> Splits:
    """One citation graph for node classification, with the split of the Planetoid paper.

    Reads ``<root>/<dataset>/raw/ind.<dataset>.*`` (the files of kimiyoung/planetoid) with PyG's own
    reader, writing nothing; where they are absent and ``download`` is set,
    ``torch_geometric.datasets.Planetoid(root, name)`` downloads and processes them into ``root``. Another data set needs only its name:
    ``data.source.dataset=CiteSeer``.

    Args:
        dataset: ``Cora``, ``CiteSeer`` or ``PubMed`` (any case).
        root: folder holding ``<dataset>/raw/``.
        split: ``public`` (20 labelled nodes per class, 500 validation, 1000 test) or ``full`` (every
            node outside validation and test is a training node).
        download: download the data set when ``root`` lacks it (needs internet).
    """
    canonical = next((n for n in NAMES if n.lower() == dataset.lower()), None)
    if canonical is None:
        raise DataError(
            f"data.source.dataset: '{dataset}' is not a Planetoid data set; choose one of {', '.join(NAMES)}."
        )
    raw = Path(root) / canonical / "raw"
    if (raw / f"ind.{canonical.lower()}.x").is_file():
        from torch_geometric.io import read_planetoid_data

        graph = read_planetoid_data(str(raw), canonical.lower())
    elif download:
        from torch_geometric.datasets import Planetoid

        try:
            graph = Planetoid(root, canonical)[0]
        except Exception as e:  # no network (URLError, socket errors): say where the files go
            raise DataError(
                f"data.source: {raw} has no Planetoid files and downloading {canonical} failed ({e}); put "
                f"ind.{canonical.lower()}.* from github.com/kimiyoung/planetoid into {raw}."
            ) from e
    else:
        raise DataError(
            f"data.source.root: {raw} has no ind.{canonical.lower()}.* files and download=false; put the "
            "Planetoid files there or set data.source.download=true."
        )
    if split == "full":
        graph.train_mask = ~(graph.val_mask | graph.test_mask)
    return node_splits(graph)
