"""Batched greedy generation for evaluation (transformers ``generate`` with left padding)."""

from __future__ import annotations

from typing import Any

import torch


@torch.no_grad()
def greedy_generate(
    model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, batch_size: int, device: Any
) -> list[str]:
    """Decode ``max_new_tokens`` greedily after each prompt; stop at eos; return the new text."""
    ids = [[tokenizer.bos_token_id, *tokenizer.encode(p, add_special_tokens=False)] for p in prompts]
    return greedy_generate_ids(model, tokenizer, ids, max_new_tokens, batch_size, device)


@torch.no_grad()
def greedy_generate_ids(
    model: Any, tokenizer: Any, prompts: list[list[int]], max_new_tokens: int, batch_size: int, device: Any
) -> list[str]:
    """``greedy_generate`` from prompts already tokenized (a chat template's ids, specials included)."""
    tokenizer.padding_side = "left"
    outputs: list[str] = []
    for start in range(0, len(prompts), batch_size):
        ids = prompts[start : start + batch_size]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(ids), width), dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, width - len(x) :] = torch.tensor(x)
            attention[i, width - len(x) :] = 1
        out = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        outputs.extend(tokenizer.batch_decode(out[:, width:], skip_special_tokens=True))
    return outputs
