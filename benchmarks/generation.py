"""Offline batched generation: our ``torch`` engine vs transformers ``generate`` on the same tiny model.

For each batch size, both generate exactly ``--new-tokens`` tokens greedily (eos ignored) from the
same ``--prompt-len``-token prompts; each is timed ``--repeats`` times, interleaved, and the median
counts. Prints one JSON object: output tokens/s of each, the ratio (ours / HF), whether the greedy
token ids agree, and the machine's load average (other processes share these cores).

    python benchmarks/generation.py                       # batch sizes 1, 8, 32
    python benchmarks/generation.py --batch-sizes 1 64 --threads 1
    python benchmarks/generation.py --size 512     # the standard-shaped 512-wide model (head dim 64, MLP 4x)
    python benchmarks/generation.py --size 85m     # the training benchmarks' 85M model, 30k WordPiece vocabulary

``--size`` sets the shape (tiny: 64 wide, 2 layers, 2 heads, MLP 256; 512: 512 wide, 4 layers, 8
heads, MLP 2048; 85m: 768 wide, 12 layers, 12 heads, MLP 2048); ``--hidden-size`` and the other
shape flags override it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

SIZES = {
    "tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 256},
    "512": {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "intermediate_size": 2048},
    "85m": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 2048},
}


def size_tokenizer(size: str):
    """The tokenizer of ``--size``: the 85M model's 30k WordPiece, else characters."""
    from toolbox.core.registries import TOKENIZERS

    if size == "85m":
        from harness.sizes import minilm_tokenizer

        return TOKENIZERS.build({"name": "hf_tokenizer", "path": minilm_tokenizer()})
    return TOKENIZERS.build({"name": "char"}, corpus=["abcdefghijklmnopqrstuvwxyz0123456789 +-*/=()"])


def build_model(
    vocab_size: int,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    seed: int,
    intermediate_size: int | None = None,
):
    import torch

    from toolbox.core.registries import MODELS

    torch.manual_seed(seed)
    model = MODELS.build(
        {
            "name": "tiny_llama",
            "hidden_size": hidden_size,
            "num_layers": num_layers,
            "num_heads": num_heads,
            **({"intermediate_size": intermediate_size} if intermediate_size else {}),
        },
        vocab_size=vocab_size,
    )
    model.generation_config.eos_token_id = None  # HF generate then runs to max_new_tokens, as ignore_eos
    return model.eval()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="the model's shape")
    parser.add_argument("--hidden-size", type=int, default=None)
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--num-heads", type=int, default=None)
    parser.add_argument("--intermediate-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    import torch
    from transformers import GenerationConfig

    from toolbox.core.registries import ENGINES
    from toolbox.serving.engine import SamplingParams

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tokenizer = size_tokenizer(args.size)
    model = build_model(
        len(tokenizer), args.hidden_size, args.num_layers, args.num_heads, args.seed, args.intermediate_size
    )
    engine = ENGINES.build(
        {
            "name": "torch",
            "max_batch_size": max(args.batch_sizes),
            "max_model_len": args.prompt_len + args.new_tokens,
        },
        model=model,
        tokenizer=tokenizer,
    )
    hf_config = GenerationConfig(
        max_new_tokens=args.new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)
    generator = torch.Generator().manual_seed(args.seed)
    low = len(tokenizer.all_special_ids)

    hf_thread = ThreadPoolExecutor(1)  # HF runs off the main thread too, as our engine's loop does

    def hf_generate(ids: torch.Tensor) -> list[list[int]]:
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=hf_config)
        return out[:, ids.shape[1] :].tolist()

    def run_hf(ids: torch.Tensor) -> list[list[int]]:
        return hf_thread.submit(hf_generate, ids).result()

    def run_ours(ids: torch.Tensor) -> list[list[int]]:
        return [o.completions[0].token_ids for o in engine.generate(ids.tolist(), params)]

    results = []
    for batch in args.batch_sizes:
        ids = torch.randint(low, len(tokenizer), (batch, args.prompt_len), generator=generator)
        match = run_hf(ids) == run_ours(ids)  # also warms both up
        times: dict[str, list[float]] = {"hf": [], "torch": []}
        for _ in range(args.repeats):
            for name, fn in (("hf", run_hf), ("torch", run_ours)):
                start = time.perf_counter()
                fn(ids)
                times[name].append(time.perf_counter() - start)
        tokens = batch * args.new_tokens
        hf_tps = tokens / statistics.median(times["hf"])
        ours_tps = tokens / statistics.median(times["torch"])
        results.append(
            {
                "batch_size": batch,
                "hf_generate_tok_s": round(hf_tps, 1),
                "torch_engine_tok_s": round(ours_tps, 1),
                "ratio": round(ours_tps / hf_tps, 3),
                "greedy_ids_match": match,
            }
        )
    engine.shutdown()
    hf_thread.shutdown()
    report = {
        "benchmark": "offline batched generation, torch engine vs HF generate",
        "model": {
            "name": "tiny_llama",
            "hidden_size": args.hidden_size,
            "num_layers": args.num_layers,
            "num_heads": args.num_heads,
            "intermediate_size": args.intermediate_size,
            "size": args.size,
            "vocab_size": len(tokenizer),
        },
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "results": results,
        "min_ratio": min(r["ratio"] for r in results),
        "goal_ratio": 1.5,
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
