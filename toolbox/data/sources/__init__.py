"""Sources (``SOURCES``): where raw records come from; each returns ``Splits`` (train, test, facts).

- ``arithmetic``: generated problems such as ``12+34=`` → ``46`` (disjoint train and test).
- ``local``: jsonl / json / csv / parquet / arrow files or a ``datasets.save_to_disk`` folder.
- ``hub``: ``datasets.load_dataset`` (needs the Hugging Face Hub or its cache).
- ``gsm8k``: the GSM8K grade-school math problems from a local jsonl file.
"""

from toolbox.data.sources import arithmetic, gsm8k, hub, local  # noqa: F401  (registers the sources)
