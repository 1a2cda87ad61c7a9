"""``tu_dataset``: a graph-classification set in the TUDataset format, from a local root or downloaded."""

from __future__ import annotations

from pathlib import Path

from toolbox.core.bounds import Fraction
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.graphs import graph_set_splits


@SOURCES.register("tu_dataset")
def tu_dataset(
    dataset: str,
    root: str = "data/tu",
    val_fraction: Fraction = 0.1,
    test_fraction: Fraction = 0.1,
    seed: int = 0,
    download: bool = True,
) -> Splits:
    """Graphs with one class each (MUTAG, PROTEINS, ...), cut into train / validation / test.

    Reads ``<root>/<dataset>/raw/<dataset>_A.txt``, ``_graph_indicator.txt``, ``_graph_labels.txt`` (and
    optional ``_node_labels.txt``, ``_node_attributes.txt``, ...) with PyG's reader, writing nothing;
    where they are absent and ``download`` is set, ``torch_geometric.datasets.TUDataset`` downloads
    them into ``root``. Node labels become one-hot features, as in ``TUDataset``.

    Args:
        dataset: the data set's name, the prefix of its files.
        root: folder holding ``<dataset>/raw/``.
        val_fraction: share of the graphs held out for validation (model selection).
        test_fraction: share held out for the test.
        seed: seed of the split.
        download: download the data set when ``root`` lacks it (needs internet).
    """
    name = dataset
    raw = Path(root) / name / "raw"
    if (raw / f"{name}_A.txt").is_file():
        from torch_geometric.data import Data
        from torch_geometric.data.separate import separate
        from torch_geometric.io import read_tu_data

        try:
            data, slices, _ = read_tu_data(str(raw), name)
        except (FileNotFoundError, ValueError, RuntimeError, IndexError) as e:
            raise DataError(f"data.source: {raw} is not a readable TUDataset folder ({e}).") from e
        count = min(v.numel() - 1 for v in slices.values())  # as InMemoryDataset.len
        graphs = [separate(Data, data, i, slices, decrement=False) for i in range(count)]
    elif download:
        from torch_geometric.datasets import TUDataset

        try:
            graphs = list(TUDataset(root, name))
        except Exception as e:  # no network: say where the files go
            raise DataError(
                f"data.source: {raw} has no {name}_A.txt and downloading '{name}' failed ({e}); put the "
                f"TUDataset files of {name} into {raw}."
            ) from e
    else:
        raise DataError(f"data.source.root: {raw} has no {name}_A.txt and download=false.")
    if graphs and graphs[0].x is None:
        raise DataError(
            f"data.source: the graphs of {name} have no node features (no _node_labels.txt or "
            "_node_attributes.txt); add them to the folder."
        )
    return graph_set_splits(graphs, val_fraction, test_fraction, seed)
