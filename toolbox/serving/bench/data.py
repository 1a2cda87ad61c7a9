"""The prompts of ``toolbox bench serve``: random token ids (vLLM's random data set) or a JSONL file
(vLLM's custom data set), with the tokenizer that measures them."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any


@dataclass
class BenchRequest:
    prompt: str | list[int]
    prompt_len: int
    output_len: int


# data sets ----------------------------------------------------------------------------------------
def load_tokenizer(path: str | None) -> Any:
    if not path:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except Exception:
        return None


def random_requests(
    n: int, input_len: int, output_len: int, tokenizer: Any, seed: int = 0, range_ratio: float = 0.0
) -> list[BenchRequest]:
    """``n`` prompts of random tokens asking for ``output_len`` tokens, with the lengths of vLLM's
    random data set: ``input_len`` counts the tokenizer's special tokens (a BOS), so the server sees
    ``input_len`` prompt tokens; with ``range_ratio`` r the lengths are uniform integers in
    ``[floor(L (1 - r)), ceil(L (1 + r))]`` (output at least 1). The text is decoded from random
    non-special ids (random lowercase words without a tokenizer)."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    rng = random.Random(seed)
    num_special = int(tokenizer.num_special_tokens_to_add()) if tokenizer is not None else 0
    real_in = max(0, input_len - num_special)
    lo_in, hi_in = math.floor(real_in * (1 - range_ratio)), math.ceil(real_in * (1 + range_ratio))
    lo_out = max(1, math.floor(output_len * (1 - range_ratio)))
    hi_out = max(1, math.ceil(output_len * (1 + range_ratio)))
    if hi_in < 1:
        raise ValueError(f"--random-input-len {input_len} leaves no room beside {num_special} special tokens")
    vocab: list[int] = []
    if tokenizer is not None:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        special |= set(
            (tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}).values()
        )
        vocab = [i for i in range(len(tokenizer)) if i not in special]
    out = []
    for _ in range(n):
        n_in, n_out = max(1, rng.randint(lo_in, hi_in)), rng.randint(lo_out, hi_out)
        if tokenizer is not None:
            text = tokenizer.decode([rng.choice(vocab) for _ in range(n_in)])
            prompt_len = len(tokenizer(text)["input_ids"])  # what the server sees, specials included
        else:
            text = " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=4)) for _ in range(n_in))
            prompt_len = n_in
        out.append(BenchRequest(text, prompt_len, n_out))
    return out


def jsonl_requests(
    path: str, n: int, output_len: int, tokenizer: Any, seed: int = 0, shuffle: bool = True
) -> list[BenchRequest]:
    """Prompts from a JSONL file: one object per line with ``prompt`` (or ``text``), optional
    ``output_tokens`` (vLLM's ``custom`` data set), ``output_len`` or ``max_tokens``; sampled (with
    replacement if there are fewer than ``n``), or with ``shuffle=False`` the first ``n`` in file
    order (repeated from the top if there are fewer), as ``vllm bench serve --dataset-name custom
    --disable-shuffle`` takes them."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise ValueError(f"{path} holds no prompts")
    rng = random.Random(seed)
    if not shuffle:
        picked = [rows[i % len(rows)] for i in range(n)]
    elif len(rows) >= n:
        picked = rng.sample(rows, n)
    else:
        picked = [rng.choice(rows) for _ in range(n)]
    out = []
    for row in picked:
        prompt = row.get("prompt", row.get("text"))
        if prompt is None:
            raise ValueError(f"{path}: every line needs a 'prompt' field")
        plen = len(tokenizer(prompt)["input_ids"]) if tokenizer is not None else len(str(prompt).split())
        n_out = row.get("output_tokens", row.get("output_len", row.get("max_tokens", output_len)))
        out.append(BenchRequest(prompt, plen, int(n_out)))
    return out
