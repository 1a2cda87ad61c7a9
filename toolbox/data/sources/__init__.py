"""Sources (``SOURCES``): where raw records come from; each returns ``Splits`` (train, test, facts).

- ``arithmetic``: generated problems such as ``12+34=`` → ``46`` (disjoint train and test).
- ``arithmetic_pairs``: the same problems as preference pairs, right answer vs a plausible wrong one.
- ``local``: jsonl / json / csv / parquet / arrow files or a ``datasets.save_to_disk`` folder.
- ``hub``: ``datasets.load_dataset`` (needs the Hugging Face Hub or its cache).
- ``gsm8k``: the GSM8K grade-school math problems from a local jsonl file.
"""

from toolbox.data.sources import arithmetic, arithmetic_pairs, gsm8k, hub, local  # noqa: F401  (registers the sources)
from toolbox.data.sources import blobs  # noqa: F401,E402
