"""Truncated importance sampling: the weights and statistics of each mode, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from toolbox.objectives.policy import ClippedPolicyLoss, PolicyBatch
from toolbox.rl.importance import importance_weights

OLD = torch.log(torch.tensor([[0.5, 0.4, 0.9], [0.2, 0.3, 0.1]]))
SAMPLING = torch.log(torch.tensor([[0.25, 0.4, 0.1], [0.2, 0.6, 0.7]]))
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last token of row 1 is padding


def test_token_truncate_caps_each_ratio():
    w, stats = importance_weights(OLD, SAMPLING, MASK, "token_truncate", cap=3.0)
    expected = torch.tensor([[2.0, 1.0, 3.0], [1.0, 0.5, 1.0]])  # 9 → 3; padding: ratio 1
    torch.testing.assert_close(w, expected)
    assert stats["is/ratio_max"] == pytest.approx(9.0)
    assert stats["is/ratio_min"] == pytest.approx(0.5)
    assert stats["is/ratio_mean"] == pytest.approx((2 + 1 + 9 + 1 + 0.5) / 5)
    assert stats["is/clip_fraction"] == pytest.approx(1 / 5)


def test_token_mask_zeroes_the_ratios_above_the_cap():
    w, stats = importance_weights(OLD, SAMPLING, MASK, "token_mask", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, 0.0], [1.0, 0.5, 1.0]]))
    assert stats["is/clip_fraction"] == pytest.approx(1 / 5)


def test_sequence_modes_use_the_product_of_the_token_ratios():
    w, stats = importance_weights(OLD, SAMPLING, MASK, "sequence_truncate", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[3.0], [0.5]]))  # 2·1·9 = 18 → 3; 1·0.5 (padding left out)
    assert stats["is/ratio_max"] == pytest.approx(18.0) and stats["is/clip_fraction"] == 0.5
    w, _ = importance_weights(OLD, SAMPLING, MASK, "sequence_mask", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[0.0], [0.5]]))


def test_bad_mode_or_cap_is_an_error():
    with pytest.raises(ValueError, match="choose one of token_truncate"):
        importance_weights(OLD, SAMPLING, MASK, "tokens", cap=3.0)
    with pytest.raises(ValueError, match="cap 0"):
        importance_weights(OLD, SAMPLING, MASK, "token_truncate", cap=0)


def test_the_objective_weights_each_tokens_loss():
    """With ratio 1 (new = old) the grpo loss of a token is −A; the weights scale it per token."""
    logps = OLD.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0])
    base = PolicyBatch(logprobs=logps, completion_mask=MASK, advantages=adv)
    weights, _ = importance_weights(OLD, SAMPLING, MASK, "token_truncate", cap=3.0)
    loss = ClippedPolicyLoss(loss_type="dapo")
    plain = loss(base)
    weighted = loss(PolicyBatch(logprobs=logps, completion_mask=MASK, advantages=adv, is_weights=weights))
    assert plain.loss_sum.item() == pytest.approx(-(3 * 1.0) + 2 * 2.0)
    assert weighted.loss_sum.item() == pytest.approx(-(2 + 1 + 3) * 1.0 + (1 + 0.5) * 2.0)
    assert not math.isclose(plain.loss_sum.item(), weighted.loss_sum.item())
