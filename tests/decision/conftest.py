"""A tiny local model (random init, BPE tokenizer trained here) saved where transformers loads it."""

from __future__ import annotations

import pytest

CORPUS = [
    "State: I lost my card yesterday and need a new one. Question: Which intent is this? Options: "
    "A. lost card B. balance C. transfer D. refund Answer with the letter only.",
    "You are a decision function. You will be given a state and one question. Reply with the answer "
    "label only: no words, no punctuation, no explanation.",
    "Is the customer angry? Answer Yes or No. How urgent is it? Pick the level that applies (the levels "
    "are ordered): 1. low 2. medium 3. high Answer with the number only. Answer on a scale from 0 to 1.",
]


def build_tiny(
    path, seed: int = 0, vocab_size: int = 400, hidden: int = 64, layers: int = 2, sharpen: float = 12.0
):
    import torch

    from toolbox.core.registries import MODELS, TOKENIZERS

    tok = TOKENIZERS.build({"name": "bpe", "vocab_size": vocab_size}, corpus=CORPUS * 20)
    torch.manual_seed(seed)
    model = MODELS.build(
        {
            "name": "tiny_llama",
            "hidden_size": hidden,
            "num_layers": layers,
            "num_heads": 2,
            "intermediate_size": 128,
            "max_position_embeddings": 512,
        },
        vocab_size=len(tok),
    )
    with torch.no_grad():  # larger weights: a random model whose answers depend on the state and options
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(sharpen)
    model.eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model, tok


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("decision_model")
    model, tok = build_tiny(path)
    return model, tok, str(path)
