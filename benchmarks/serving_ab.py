"""Our server from two checkouts (before and after a change) side by side: the same model, loads and client.

Both servers are up at once (``toolbox serve`` from each tree, the settings of benchmarks/serving.py:
``engine.num_threads=1 engine.prefill_threads=2``) and measured with ``run_benchmark`` at the loads of
benchmarks/serving.py (burst, max concurrency 1 and 8): per load one unmeasured run of each, then
``--rounds`` rounds in alternating order. A figure is the median over rounds; a ratio is the median
over rounds of after/before within a round, oriented so that > 1 means the after tree is better
(throughput after/before, latencies before/after). A change to the server should keep every ratio
near 1 or above; the spread of the rounds' ratios says how much the machine's load moves them.

    git worktree add /tmp/before <commit>
    python benchmarks/serving_ab.py --before /tmp/before --after . --out benchmarks/results/serving_ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving  # noqa: E402  (its helpers: the model, server start/stop, the alternating comparison)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="checkout of the tree before the change")
    p.add_argument(
        "--after", default=str(serving.REPO), help="checkout of the tree after it (default: this one)"
    )
    p.add_argument("--out", default="benchmarks/results/serving_ab.json")
    p.add_argument("--num-prompts", type=int, default=40)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    serving.add_autogroup_nice(p)
    args = p.parse_args()
    serving.use_autogroup_nice(args.autogroup_nice)

    from conftest import free_port

    tmp = Path(tempfile.mkdtemp(prefix="serving-ab-"))
    model_dir = serving.make_model_dir(tmp / "model")
    # compare() orients ratios as toolbox over vllm: "toolbox" is the after tree, "vllm" the before tree
    trees = {"toolbox": Path(args.after).resolve(), "vllm": Path(args.before).resolve()}
    procs, urls = [], {}
    try:
        for key, tree in trees.items():
            port = free_port()
            env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", PYTHONPATH=str(tree))
            procs.append(serving.start(
                [sys.executable, "-m", "toolbox.cli", "serve", f"model={model_dir}", "engine.num_threads=1",
                 "engine.prefill_threads=2", "--served-model-name", "tiny", "--port", str(port)],
                env, f"http://127.0.0.1:{port}/v1", tmp / f"{key}.log", 120,
            ))  # fmt: skip
            urls[key] = f"http://127.0.0.1:{port}/v1"
        loads = serving.compare(urls, model_dir, args)
    finally:
        for proc in procs:
            serving.stop(proc)
    result = {
        "before": str(trees["vllm"]),
        "after": str(trees["toolbox"]),
        "load": f"{args.num_prompts} random prompts, {args.input_len} tokens in, {args.output_len} out "
        f"(ignore_eos); median of {args.rounds} alternating rounds",
        "load_average_after": os.getloadavg()[0],
        "autogroup_nice": args.autogroup_nice,
        "loads": {
            name: {
                "after": r["toolbox"],
                "before": r["vllm"],
                "after_over_before": r["ratios"],
                "rounds": [{"after": x["toolbox"], "before": x["vllm"]} for x in r["rounds"]],
            }
            for name, r in loads.items()
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({name: r["after_over_before"] for name, r in result["loads"].items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
