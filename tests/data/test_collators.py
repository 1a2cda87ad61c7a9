from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS, DATASETS

RECORDS = [
    {"prompt": "1+2=", "completion": "3"},
    {"prompt": "12+34=", "completion": "46"},
    {"prompt": "99+99=", "completion": "198"},
    {"prompt": "5-7=", "completion": "-2"},
    {"prompt": "0+0=", "completion": "0"},
]


@pytest.fixture
def examples(char_tok):
    return DATASETS.build({"name": "prompt_completion"}, tokenizer=char_tok)(RECORDS)


def _collator(tok, name, **settings):
    return COLLATORS.build({"name": name, **settings}, tokenizer=tok)


def _tiny_llama(vocab_size: int, attn: str):
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
    config._attn_implementation = attn
    model = LlamaForCausalLM(config).eval()
    assert model.config._attn_implementation == attn
    return model


def test_pad_right_pads_to_the_longest(char_tok, examples):
    batch = _collator(char_tok, "pad")(examples)
    lengths = [len(ex["input_ids"]) for ex in examples]
    assert set(batch) == {"input_ids", "attention_mask", "completion_mask"}
    assert batch["input_ids"].shape == (5, max(lengths)) and batch["input_ids"].dtype == torch.long
    for row, ex in enumerate(examples):
        n = len(ex["input_ids"])
        assert batch["input_ids"][row, :n].tolist() == ex["input_ids"]
        assert (batch["input_ids"][row, n:] == char_tok.pad_token_id).all()
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (max(lengths) - n)
        assert batch["completion_mask"][row].tolist() == ex["completion_mask"] + [0] * (max(lengths) - n)
    assert _collator(char_tok, "pad", pad_to_multiple_of=8)(examples)["input_ids"].shape[1] % 8 == 0


def test_pad_counts_tokens_by_length_even_when_pad_is_eos(char_tok):
    class EosPad:  # a tokenizer whose pad token is its eos (as the pretrained tokenizer may set)
        pad_token_id = char_tok.eos_token_id

    ex = {"input_ids": [1, 5, char_tok.eos_token_id], "completion_mask": [0, 1, 1]}
    batch = _collator(EosPad(), "pad")([ex, {"input_ids": [1], "completion_mask": [1]}])
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_pad_errors(char_tok):
    with pytest.raises(ConfigError, match="pad_to_multiple_of"):
        _collator(char_tok, "pad", pad_to_multiple_of=0)
    with pytest.raises(DataError, match="input_ids"):
        _collator(char_tok, "pad")([{"prompt_ids": [1, 2]}])


def test_packing_layout(char_tok, examples):
    lengths = [len(ex["input_ids"]) for ex in examples]  # 7, 10, 11, 8, 6
    batch = _collator(char_tok, "packing", max_length=20)(examples)
    rows, width = batch["input_ids"].shape
    assert rows == 3 and width <= 20  # first fit: [7, 10], [11, 8], [6]
    assert (
        batch["attention_mask"].shape == (rows, 1, width, width)
        and batch["attention_mask"].dtype == torch.float32
    )
    assert batch["position_ids"][0].tolist()[:17] == list(range(7)) + list(range(10))
    assert batch["input_ids"][0, :17].tolist() == examples[0]["input_ids"] + examples[1]["input_ids"]
    # each example's first token is never a target; the rest keeps its mask
    assert batch["completion_mask"][0, 7:17].tolist() == [0] + examples[1]["completion_mask"][1:]
    assert batch["completion_mask"].sum() == sum(sum(ex["completion_mask"][1:]) for ex in examples)
    allowed = batch["attention_mask"][0, 0] == 0
    assert allowed[8, 7] and allowed[8, 8] and not allowed[8, 6] and not allowed[8, 9]  # own sequence, causal
    assert not allowed[16, :7].any() and allowed.any(-1).all()  # never another sequence; no empty query row
    assert sum(lengths) == int((batch["input_ids"] != char_tok.pad_token_id).sum())
    with pytest.raises(DataError, match="max_length"):
        _collator(char_tok, "packing", max_length=8)(examples)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logits_equal_each_sequence_run_alone(char_tok, examples, attn):
    model = _tiny_llama(len(char_tok), attn)
    batch = _collator(char_tok, "packing", max_length=24)(examples)
    assert batch["input_ids"].shape[0] < len(examples)  # really packed
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits
        alone = [model(input_ids=torch.tensor([ex["input_ids"]])).logits[0] for ex in examples]
    seen = 0
    for r in range(packed.shape[0]):
        starts = (batch["position_ids"][r] == 0).nonzero().flatten().tolist()
        for start, end in zip(starts, [*starts[1:], packed.shape[1]], strict=True):
            ids = batch["input_ids"][r, start:end].tolist()
            match = [i for i, ex in enumerate(examples) if ex["input_ids"] == ids]
            if not match:  # the padding at the row's end
                assert set(ids) == {char_tok.pad_token_id}
                continue
            torch.testing.assert_close(packed[r, start:end], alone[match[0]], atol=1e-5, rtol=0)
            seen += 1
    assert seen == len(examples)


def test_packed_and_padded_batches_give_the_same_loss(char_tok, examples):
    from toolbox.objectives.supervised import CausalLMLoss

    model = _tiny_llama(len(char_tok), "sdpa")
    loss = CausalLMLoss(completion_only=True)
    with torch.no_grad():
        padded = loss(model, _collator(char_tok, "pad")(examples))
        packed = loss(model, _collator(char_tok, "packing", max_length=24)(examples))
    assert padded.num_items == packed.num_items == sum(sum(ex["completion_mask"][1:]) for ex in examples)
    torch.testing.assert_close(packed.loss_sum, padded.loss_sum, atol=1e-4, rtol=1e-5)


def test_packing_mask_works_for_a_bfloat16_model(char_tok, examples):
    model = _tiny_llama(len(char_tok), "sdpa").to(torch.bfloat16)
    batch = _collator(char_tok, "packing", max_length=24)(examples)
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits
    assert torch.isfinite(out).all()
