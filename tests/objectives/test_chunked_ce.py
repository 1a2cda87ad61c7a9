"""chunked_cross_entropy equals F.cross_entropy on the full logits, in value and in gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolbox.objectives.chunked_ce import chunked_cross_entropy


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_equal_to_the_plain_loss_and_its_gradients(chunk_size):
    torch.manual_seed(0)
    n, h, v = 50, 16, 300
    hidden = torch.randn(n, h, requires_grad=True)
    weight = torch.randn(v, h, requires_grad=True)
    targets = torch.randint(0, v, (n,))
    targets[[3, 17, 40]] = -100

    plain = F.cross_entropy(hidden @ weight.T, targets, reduction="sum", ignore_index=-100)
    g_hidden, g_weight = torch.autograd.grad(2.5 * plain, (hidden, weight))
    chunked = chunked_cross_entropy(hidden, weight, targets, chunk_size=chunk_size)
    c_hidden, c_weight = torch.autograd.grad(2.5 * chunked, (hidden, weight))

    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(c_hidden, g_hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c_weight, g_weight, rtol=1e-5, atol=1e-5)
    assert c_hidden[3].abs().sum() == 0  # an ignored row gets no gradient


def test_bfloat16_inputs_match_within_bfloat16_rounding():
    torch.manual_seed(1)
    hidden = torch.randn(20, 32, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(100, 32, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 100, (20,))
    plain = F.cross_entropy((hidden @ weight.T).float(), targets, reduction="sum")
    chunked = chunked_cross_entropy(hidden, weight, targets, chunk_size=8)
    assert chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-3, atol=1e-2)


def test_bad_shapes_and_chunk_sizes_fail_clearly():
    with pytest.raises(ValueError, match="positive number of tokens"):
        chunked_cross_entropy(torch.randn(2, 4), torch.randn(5, 4), torch.zeros(2, dtype=torch.long), 0)
    with pytest.raises(ValueError, match=r"must be \[N, H\] and \[V, H\]"):
        chunked_cross_entropy(torch.randn(2, 3), torch.randn(5, 4), torch.zeros(2, dtype=torch.long))


def test_the_causal_lm_objective_with_vocab_chunks_equals_the_plain_one():
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolbox.objectives.supervised import CausalLMLoss

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=500, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
        )
    )
    ids = torch.randint(3, 500, (3, 12))
    attention = torch.ones_like(ids)
    attention[1, 9:] = 0
    attention[2, 5:] = 0
    completion = attention.clone()
    completion[:, :4] = 0
    batch = {"input_ids": ids, "attention_mask": attention, "completion_mask": completion}

    def run(objective):
        model.zero_grad()
        out = objective(model, batch)
        out.loss_sum.backward()
        return out, [p.grad.clone() for p in model.parameters()]

    plain, plain_grads = run(CausalLMLoss())
    chunked, chunked_grads = run(CausalLMLoss(vocab_chunk=5))
    assert chunked.num_items == plain.num_items == int(completion[:, 1:].sum())
    torch.testing.assert_close(chunked.loss_sum, plain.loss_sum, rtol=1e-5, atol=1e-4)
    assert chunked.metrics["correct"] == plain.metrics["correct"]
    for a, b in zip(chunked_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="without label_smoothing"):
        CausalLMLoss(label_smoothing=0.1, vocab_chunk=8)
