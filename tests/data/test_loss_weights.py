"""Per-token loss weights: the chat dataset's ``last_turn_weight``, carried by the collators, used by
the causal LM loss (a weight scales its tokens' cross entropy; weight 1 is the unweighted loss)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolbox.core.errors import ConfigError
from toolbox.core.registries import COLLATORS, DATASETS
from toolbox.objectives.supervised import CausalLMLoss

CONVERSATIONS = [
    [
        {"role": "user", "content": "1+2="},
        {"role": "assistant", "content": "12"},
        {"role": "tool", "content": "3"},
        {"role": "assistant", "content": "3"},
    ],
    [
        {"role": "system", "content": "0"},
        {"role": "user", "content": "12+34="},
        {"role": "assistant", "content": "12+34"},
        {"role": "tool", "content": "46"},
        {"role": "assistant", "content": "46"},
    ],
    [{"role": "user", "content": "5-7="}, {"role": "assistant", "content": "-2"}],
]


def _chat(tok, **settings):
    return DATASETS.build({"name": "chat", **settings}, tokenizer=tok)(
        [{"messages": m} for m in CONVERSATIONS]
    )


def _tiny_llama(vocab_size: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=128,
    )
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


def _heavy(tok, example, weight):
    return "".join(
        tok.convert_ids_to_tokens(
            [i for i, w in zip(example["input_ids"], example["loss_weights"], strict=True) if w == weight]
        )
    )


def test_the_last_assistant_turn_carries_the_weight(char_tok):
    plain = _chat(char_tok)
    assert all("loss_weights" not in ex for ex in plain)  # weight 1: the examples are unchanged
    weighted = _chat(char_tok, last_turn_weight=20)
    for ex, same in zip(weighted, plain, strict=True):
        assert {k: v for k, v in ex.items() if k != "loss_weights"} == same
        assert set(ex["loss_weights"]) == {1.0, 20.0}
        assert len(ex["loss_weights"]) == len(ex["input_ids"])
    # the answer after the tool's reply and its eos; the call before it is scored at weight 1
    assert [_heavy(char_tok, ex, 20.0) for ex in weighted] == ["3<|eos|>", "46<|eos|>", "-2<|eos|>"]
    second = weighted[1]
    light = [
        i
        for i, w, m in zip(
            second["input_ids"], second["loss_weights"], second["completion_mask"], strict=True
        )
        if m and w == 1.0
    ]
    assert "".join(char_tok.convert_ids_to_tokens(light)) == "12+34<|eos|>"
    with pytest.raises(ConfigError, match="last_turn_weight"):
        _chat(char_tok, last_turn_weight=0)


@pytest.mark.parametrize("collator", ["pad", "packing"])
def test_collators_carry_the_weights_with_zero_on_padding(char_tok, collator):
    examples = _chat(char_tok, last_turn_weight=5)
    settings = {"max_length": 64} if collator == "packing" else {}
    batch = COLLATORS.build({"name": collator, **settings}, tokenizer=char_tok)(examples)
    weights = batch["loss_weights"]
    assert weights.dtype == torch.float32 and weights.shape == batch["input_ids"].shape
    assert float(weights.sum()) == sum(sum(ex["loss_weights"]) for ex in examples)
    assert int((weights == 5.0).sum()) == sum(ex["loss_weights"].count(5.0) for ex in examples)
    plain = COLLATORS.build({"name": collator, **settings}, tokenizer=char_tok)(_chat(char_tok))
    assert "loss_weights" not in plain
    # an example without weights, batched with weighted ones, counts 1.0 per token
    mixed = COLLATORS.build({"name": collator, **settings}, tokenizer=char_tok)(
        [_chat(char_tok)[0], *examples[1:]]
    )
    assert float(mixed["loss_weights"].sum()) == len(examples[0]["input_ids"]) + sum(
        sum(ex["loss_weights"]) for ex in examples[1:]
    )


@pytest.mark.parametrize("forward", ["model", "lean", "exact"])
def test_a_weight_scales_its_tokens_loss_and_weight_one_is_the_plain_loss(char_tok, forward):
    from toolbox.nn.llama_training import training_forward

    model = _tiny_llama(len(char_tok))
    run = model if forward == "model" else training_forward(model, exact=forward == "exact")
    loss = CausalLMLoss(completion_only=True)
    pad = COLLATORS.build({"name": "pad"}, tokenizer=char_tok)
    plain_batch = pad(_chat(char_tok))
    with torch.no_grad():
        plain = loss(run, plain_batch)
        ones = loss(run, {**plain_batch, "loss_weights": torch.ones(plain_batch["input_ids"].shape)})
        double = loss(run, {**plain_batch, "loss_weights": 2 * torch.ones(plain_batch["input_ids"].shape)})
        weighted_batch = pad(_chat(char_tok, last_turn_weight=20))
        weighted = loss(run, weighted_batch)
        # the reference: per-token cross entropy of the model's own forward, weighted by hand
        logits = model(input_ids=plain_batch["input_ids"]).logits[:, :-1].float()
        token_ce = F.cross_entropy(logits.transpose(1, 2), plain_batch["input_ids"][:, 1:], reduction="none")
    scored = plain_batch["completion_mask"][:, 1:].bool()
    last = weighted_batch["loss_weights"][:, 1:] == 20.0
    assert torch.equal(ones.loss_sum, plain.loss_sum)  # weight 1: bit for bit
    assert ones.num_items == plain.num_items == weighted.num_items == int(scored.sum())
    assert ones.metrics == plain.metrics == weighted.metrics  # token accuracy is unweighted
    torch.testing.assert_close(double.loss_sum, 2 * plain.loss_sum)
    expected = token_ce[scored & ~last].sum() + 20 * token_ce[scored & last].sum()
    torch.testing.assert_close(weighted.loss_sum, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(plain.loss_sum, token_ce[scored].sum(), rtol=1e-5, atol=1e-4)
    # packed rows give the same weighted sum as padded ones
    packed = COLLATORS.build({"name": "packing", "max_length": 64}, tokenizer=char_tok)(
        _chat(char_tok, last_turn_weight=20)
    )
    if forward != "model":  # the lean forwards take packed rows through position_ids and the 4-D mask
        with torch.no_grad():
            torch.testing.assert_close(loss(run, packed).loss_sum, weighted.loss_sum, rtol=1e-5, atol=1e-4)
