"""Records from ``datasets.load_dataset``: the Hugging Face Hub, or its local cache."""

from __future__ import annotations

from toolbox.core.bounds import Fraction
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.sources.holdout import fraction_to_count, hold_out


@SOURCES.register("hub")
def hub(
    path: str,
    name: str | None = None,
    train_split: str = "train",
    test_split: str | None = "test",
    test_fraction: Fraction | None = None,
    seed: int = 0,
    revision: str | None = None,
    cache_dir: str | None = None,
) -> Splits:
    """A data set loaded with ``datasets.load_dataset(path, name)``.

    Without network access this fails with a DataError telling how to read the same data from
    local files instead (``data=local``: the ``local_files`` source). Set ``HF_HUB_OFFLINE=1`` on
    machines without network so the failure is immediate rather than after the download retries.

    Args:
        path: the hub id (``openai/gsm8k``) or anything else ``load_dataset`` accepts.
        name: the configuration (subset) of the data set, if it has several.
        train_split: the split used for training.
        test_split: the split used for testing; null for none.
        test_fraction: when the data set has no such test split, hold out this fraction of train.
        seed: seed of the held-out draw.
        revision: a branch, tag or commit of the data set's repository.
        cache_dir: where ``datasets`` caches downloads (null: its default, HF_DATASETS_CACHE).
    """
    from datasets import load_dataset

    try:
        loaded = load_dataset(path, name, revision=revision, cache_dir=cache_dir)
    except Exception as e:  # datasets raises many kinds (ConnectionError, FileNotFoundError, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(
            f"data.source: could not load '{path}' with datasets.load_dataset ({type(e).__name__}: {first}). "
            f"Without network access, get the data elsewhere (datasets' save_to_disk, or jsonl/parquet "
            f"files) and use it here with data=local data.source.path=<that folder or file>."
        ) from None
    if train_split not in loaded:
        raise DataError(
            f"data.source.train_split: '{path}' has no split '{train_split}'; its splits: {', '.join(loaded)}."
        )
    train = loaded[train_split].to_list()
    if test_split is None:
        return Splits(train=train, test=[])
    if test_split in loaded:
        return Splits(train=train, test=loaded[test_split].to_list())
    if test_fraction is None:
        raise DataError(
            f"data.source.test_split: '{path}' has no split '{test_split}' (its splits: {', '.join(loaded)}); "
            "choose one, set data.source.test_fraction=0.05 to hold out part of train, or test_split=null."
        )
    count = fraction_to_count(test_fraction, len(train), "data.source.test_fraction")
    train, test = hold_out(train, count, seed, "data.source.test_fraction")
    return Splits(train=train, test=test)
