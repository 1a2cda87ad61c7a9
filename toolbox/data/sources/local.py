"""Records from local files: one data file, a folder of split files, or a ``save_to_disk`` folder."""

from __future__ import annotations

from pathlib import Path

from toolbox.core.bounds import Fraction
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Record, Splits
from toolbox.data.sources.files import SUFFIXES, read_records
from toolbox.data.sources.holdout import fraction_to_count, hold_out


@SOURCES.register("local_files")
def local(
    path: str,
    train: str = "train",
    test: str | None = "test",
    test_fraction: Fraction | None = None,
    seed: int = 0,
) -> Splits:
    """Records read from local files, the format chosen by the file suffix.

    ``path`` may be

    - a data file (.jsonl, .json, .csv, .parquet, .arrow): the training split;
    - a folder holding one file per split, named ``<train>.<suffix>`` and ``<test>.<suffix>``;
    - a folder written by ``datasets`` ``save_to_disk`` (a DatasetDict with those split names, or a
      single Dataset: the training split).

    When no test split exists, ``test_fraction`` holds out a seeded part of the training records.

    Args:
        path: the data file or folder.
        train: name of the training split (the file stem in a folder, the split of a DatasetDict).
        test: name of the test split; null for no test split.
        test_fraction: with no test split found, hold out this fraction of train as the test split.
        seed: seed of the held-out draw.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise DataError(
            f"data.source.path: {root.resolve()} does not exist; expected a data file "
            f"({', '.join(SUFFIXES)}), a folder holding {train}.jsonl (and {test}.jsonl), or a "
            "datasets.save_to_disk folder."
        )
    if root.is_file():
        train_records, test_records = _read_split(root, "train"), None
        looked_for = f"{root} is a single file, so it has no test split"
    elif (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        train_records, test_records = _saved_splits(root, train, test)
        looked_for = f"the saved datasets in {root} have no split '{test}'"
    else:
        train_file = _split_file(root, train)
        if train_file is None:
            raise DataError(
                f"data.source.path: {root} holds no training split: looked for "
                f"{', '.join(_candidates(train))} (and dataset_dict.json of save_to_disk); "
                "set data.source.train to the file's name or point data.source.path at the file."
            )
        test_file = _split_file(root, test) if test else None
        train_records = _read_split(train_file, "train")
        test_records = _read_split(test_file, "test") if test_file else None
        looked_for = f"{root} holds none of {', '.join(_candidates(test or 'test'))}"
    if test_records is None and test is not None:
        if test_fraction is None:
            raise DataError(
                f"data.source: {looked_for}. Set data.source.test_fraction=0.05 to hold out part of the "
                "training records, or data.source.test=null for no test split."
            )
        count = fraction_to_count(test_fraction, len(train_records), "data.source.test_fraction")
        train_records, test_records = hold_out(train_records, count, seed, "data.source.test_fraction")
    return Splits(train=train_records, test=test_records or [])


def _read_split(path: Path, split: str) -> list[Record]:
    """The records of one split's file; an empty file is an error that names the file."""
    records = read_records(path)
    if not records:
        raise DataError(
            f"data.source.path: {path} is empty (no records), so the {split} split would be empty; "
            "write one JSON object per line into it, or point data.source.path at another file."
        )
    return records


def _candidates(name: str) -> list[str]:
    return [name] if Path(name).suffix.lower() in SUFFIXES else [f"{name}{s}" for s in SUFFIXES]


def _split_file(root: Path, name: str) -> Path | None:
    found = [root / c for c in _candidates(name) if (root / c).is_file()]
    if len(found) > 1:
        raise DataError(
            f"data.source.path: {root} holds several files for split '{name}' "
            f"({', '.join(f.name for f in found)}); keep one, or name it in data.source.{name}=<file name>."
        )
    return found[0] if found else None


def _saved_splits(root: Path, train: str, test: str | None) -> tuple[list[Record], list[Record] | None]:
    from datasets import Dataset, load_from_disk

    saved = load_from_disk(str(root))
    if isinstance(saved, Dataset):
        return saved.to_list(), None
    if train not in saved:
        raise DataError(
            f"data.source.train: the saved datasets in {root} have no split '{train}'; "
            f"their splits: {', '.join(saved)}."
        )
    test_split = saved[test].to_list() if test and test in saved else None
    return saved[train].to_list(), test_split
