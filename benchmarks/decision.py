"""Decision readouts: our reader (torch backend, shared-prefix rotations) vs anyjev 0.3.0's Decider (HF).

The same local Llama (random init, a BPE tokenizer trained here, saved to a temp folder that both
load), the same states (``--state-messages`` generated customer messages each: a conversation) and
the same 10-option choice question; each side reads every state at
``raw`` and at ``L0`` (10 rotations, the batch prior), timed ``--repeats`` times in alternating
order, the median counting. anyjev runs with its defaults (``shared_prefix="auto"``: it shares a
prefix only from 256 tokens on) and, as a second peer, with ``shared_prefix=True``. Prints one JSON
object: decisions/s of each, the ratios (ours / anyjev), the largest difference between the two
sides' distributions, and the load average (other processes share these cores).

    python benchmarks/decision.py                          # 64 states, hidden 256, 4 layers
    python benchmarks/decision.py --states 128 --threads 1 --out benchmarks/results/decision.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

OPTIONS = ["check balance", "transfer money", "lost card", "refund", "change address", "open account",
           "close account", "loan rates", "pay bill", "report fraud"]  # fmt: skip
QUESTION = "Which intent does the customer message have?"


def build(path: str, hidden: int, layers: int, heads: int, seed: int):
    import torch

    from toolbox.core.registries import MODELS, TOKENIZERS
    from toolbox.data.sources.intents import intents

    splits = intents(num_train=1000, num_test=0, num_intents=10, seed=seed)
    corpus = [r["text"] for r in splits.train] + OPTIONS + [QUESTION]
    texts = [r["text"] for r in splits.train]
    tok = TOKENIZERS.build({"name": "bpe", "vocab_size": 1024}, corpus=corpus)
    torch.manual_seed(seed)
    model = MODELS.build(
        {"name": "tiny_llama", "hidden_size": hidden, "num_layers": layers, "num_heads": heads,
         "intermediate_size": 4 * hidden, "max_position_embeddings": 1024},
        vocab_size=len(tok),
    ).eval()  # fmt: skip
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model, tok, texts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=64)
    parser.add_argument(
        "--state-messages",
        type=int,
        default=6,
        help="customer messages per state (a conversation; 1: one message)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per forward, both sides")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from anyjev import Decider
    from anyjev import Question as AQ
    from anyjev.backends.hf import HFBackend

    from toolbox.decision import DecisionReader, Question
    from toolbox.decision.backends.torch import TorchDecisionBackend

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="decision_bench_")
    model, tok, texts = build(tmp, args.hidden_size, args.num_layers, args.num_heads, args.seed)
    m = args.state_messages
    states = ["\n".join(f"customer: {t}" for t in texts[i * m : (i + 1) * m]) for i in range(args.states)]
    ours_q, their_q = Question.choice(QUESTION, OPTIONS), AQ.choice(QUESTION, OPTIONS)
    backend = TorchDecisionBackend(model, tok, max_batch_size=max(args.batch_size, len(OPTIONS)))
    their_backend = HFBackend(tmp, device="cpu", dtype="float32", batch_size=args.batch_size)

    def ours(level: str):
        return np.stack([d.probs for d in DecisionReader(backend).decide_batch(states, ours_q, level=level)])

    def theirs(level: str, shared="auto"):
        decider = Decider(their_backend, shared_prefix=shared)
        return np.stack([d.probs for d in decider.decide_batch(states, their_q, level=level)])

    sides = {"ours": ours, "anyjev": theirs, "anyjev_shared": lambda level: theirs(level, True)}
    result: dict = {
        "benchmark": "decision",
        "model": {"hidden_size": args.hidden_size, "num_layers": args.num_layers, "vocab": len(tok)},
        "states": len(states),
        "state_messages": m,
        "options": len(OPTIONS),
        "prompt_tokens": len(
            tok.encode(DecisionReader(backend).prompt(states[0], ours_q, range(10))[0].text)
        ),
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
    }
    for level in ("raw", "L0"):
        for side in sides.values():  # warm-up (and the outputs compared below)
            side(level)
        times: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(args.repeats):
            for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
                start = time.perf_counter()
                sides[name](level)
                times[name].append(time.perf_counter() - start)
        per_s = {name: len(states) / statistics.median(t) for name, t in times.items()}
        result[level] = {
            "decisions_per_s": {k: round(v, 2) for k, v in per_s.items()},
            "ratio_vs_anyjev": round(per_s["ours"] / per_s["anyjev"], 3),
            "ratio_vs_anyjev_shared": round(per_s["ours"] / per_s["anyjev_shared"], 3),
            "max_abs_diff": float(np.abs(ours(level) - theirs(level)).max()),
            "goal": 1.0 if level == "raw" else 2.0,
        }
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
