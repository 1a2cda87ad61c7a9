"""Sources (``SOURCES``): where raw records come from; each returns ``Splits`` (train, test, facts).

- ``arithmetic``: generated problems such as ``12+34=`` → ``46`` (disjoint train and test).
- ``arithmetic_pairs``: the same problems as preference pairs, right answer vs a plausible wrong one.
- ``arithmetic_tools``: word problems solved by a calculator tool call, as chat records (agents).
- ``lookup_tools``: problems solved by a lookup call, then a calculator call, as chat records (the
  ``lookup_calculator`` environment's task).
- ``arithmetic_unpaired``: the same problems as unpaired KTO data, a right (label true) or a wrong
  (label false) answer each.
- ``local``: jsonl / json / csv / parquet / arrow files or a ``datasets.save_to_disk`` folder.
- ``hub``: ``datasets.load_dataset`` (needs the Hugging Face Hub or its cache).
- ``gsm8k``: the GSM8K grade-school math problems from a local jsonl file.
- ``blobs``: generated Gaussian clusters for classifiers (facts: in_dim, num_classes).
- ``intents``: generated customer messages with one of 12 intents (decision readouts).
- ``planetoid``, ``tu_dataset``, ``karate_club``, ``sbm``: PyG graphs for node, link and graph tasks
  (``toolbox.data.graphs``; facts: in_dim, num_classes).
"""

from toolbox.data.sources import (  # noqa: F401  (registers the sources)
    arithmetic,
    arithmetic_pairs,
    arithmetic_tools,
    arithmetic_unpaired,
    blobs,
    gsm8k,
    hub,
    intents,
    karate_club,
    local,
    lookup_tools,
    planetoid,
    sbm,
    tu_dataset,
)
