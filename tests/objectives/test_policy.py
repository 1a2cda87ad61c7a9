"""Policy objectives: each GRPO aggregation mode against a hand-computed loop, clipping, GSPO, KL
estimators, the entropy bonus, and TRL 1.16's ``GRPOTrainer._compute_loss`` on the same tensors."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import PolicyObjective
from toolbox.objectives.kl import kl_estimate
from toolbox.objectives.policy import ClippedPolicyLoss, PolicyBatch, aggregate

B, T, L = 4, 5, 7  # L: max_completion_length for dr_grpo


def _batch(seed=0, spread=0.5):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(B, T, generator=g) * 2
    old = logps + (torch.rand(B, T, generator=g) - 0.5) * spread
    ref = logps + (torch.rand(B, T, generator=g) - 0.5) * spread
    lengths = torch.tensor([5, 3, 1, 4])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    adv = torch.tensor([1.0, -0.5, 0.8, -1.2])
    entropy = torch.rand(B, T, generator=g)
    return logps, old, ref, mask, adv, entropy


def _hand(logps, old, ref, mask, adv, loss_type, eps_low=0.2, eps_high=0.2, beta=0.0, seq=False):
    """The GRPO loss with plain Python loops over sequences and tokens."""
    per_seq_tokens = []
    for i in range(B):
        n = int(mask[i].sum())
        seq_log_ratio = sum(float(logps[i, t] - old[i, t]) for t in range(n)) / max(n, 1)
        row = []
        for t in range(T):
            lr = seq_log_ratio if seq else float(logps[i, t] - old[i, t])
            r = math.exp(lr)
            a = float(adv[i])
            loss = -min(r * a, min(max(r, 1 - eps_low), 1 + eps_high) * a)
            if beta:
                d = float(ref[i, t] - logps[i, t])
                loss += beta * (math.exp(d) - d - 1)
            row.append(loss if t < n else 0.0)
        per_seq_tokens.append((row, n))
    if loss_type == "grpo":
        return sum(sum(row) / max(n, 1) for row, n in per_seq_tokens) / B
    total = sum(sum(row) for row, _ in per_seq_tokens)
    if loss_type in ("dapo", "bnpo"):
        return total / sum(n for _, n in per_seq_tokens)
    if loss_type == "dr_grpo":
        return total / (B * L)
    raise AssertionError(loss_type)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize(
    ("eps_low", "eps_high", "beta", "seq"),
    [(0.2, 0.2, 0.0, False), (0.2, 0.28, 0.04, False), (0.1, 0.3, 0.0, True)],
)
def test_each_aggregation_equals_hand_computed(loss_type, eps_low, eps_high, beta, seq):
    logps, old, ref, mask, adv, _ = _batch()
    objective = ClippedPolicyLoss(
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        beta=beta,
        importance_sampling_level="sequence" if seq else "token",
        max_completion_length=L,
    )
    out = objective(PolicyBatch(logps, mask, adv, old_logprobs=old, ref_logprobs=ref))
    expected = _hand(logps, old, ref, mask, adv, loss_type, eps_low, eps_high, beta, seq)
    assert float(out.loss_sum) / out.num_items == pytest.approx(expected, abs=1e-6)


def test_counts_make_accumulation_exact():
    """Splitting a batch in two and adding sums/counts gives the full batch's loss (grpo, dapo, dr_grpo)."""
    logps, old, ref, mask, adv, _ = _batch(1)
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        obj = ClippedPolicyLoss(loss_type=loss_type, max_completion_length=L)
        full = obj(PolicyBatch(logps, mask, adv, old_logprobs=old))
        halves = [
            obj(PolicyBatch(logps[s], mask[s], adv[s], old_logprobs=old[s]))
            for s in (slice(0, 2), slice(2, 4))
        ]
        merged = sum(float(h.loss_sum) for h in halves) / sum(h.num_items for h in halves)
        assert merged == pytest.approx(float(full.loss_sum) / full.num_items, abs=1e-6), loss_type


def test_on_policy_gradient_is_advantage_weighted_logprob_gradient():
    """With old = new (ratio 1, nothing clipped), grad of the grpo loss = -A/|o| per token / B."""
    logps, _, _, mask, adv, _ = _batch(2)
    x = logps.clone().requires_grad_(True)
    out = ClippedPolicyLoss(loss_type="grpo")(PolicyBatch(x, mask, adv))
    (out.loss_sum / out.num_items).backward()
    expected = -adv[:, None] * mask / mask.sum(-1, keepdim=True) / B
    torch.testing.assert_close(x.grad, expected)
    assert out.metrics["clip_ratio/region"] == 0.0 and out.metrics["ratio"] == pytest.approx(1.0)


def test_asymmetric_clipping_stops_gradient_outside_range():
    mask = torch.ones(2, 1)
    new = torch.zeros(2, 1, requires_grad=True)
    # ratio 1.25: inside [0.8, 1.28] -> gradient flows (A > 0); ratio 1.25 with eps_high 0.2 -> clipped
    old = torch.full((2, 1), -math.log(1.25))
    adv = torch.tensor([1.0, 1.0])
    for eps_high, flows in ((0.28, True), (0.2, False)):
        new.grad = None
        out = ClippedPolicyLoss(loss_type="dapo", epsilon_low=0.2, epsilon_high=eps_high)(
            PolicyBatch(new, mask, adv, old_logprobs=old)
        )
        (out.loss_sum / out.num_items).backward()
        assert (new.grad.abs().sum() > 0) == flows
        assert out.metrics["clip_ratio/high"] == (0.0 if flows else 1.0)


def test_gspo_uses_one_ratio_per_sequence():
    logps, old, _, mask, adv, _ = _batch(3)
    obj = OBJECTIVES.build({"name": "gspo", "epsilon_low": 10.0, "epsilon_high": 10.0})
    out = obj(PolicyBatch(logps, mask, adv, old_logprobs=old))
    seq_ratio = torch.exp(((logps - old) * mask).sum(-1) / mask.sum(-1))
    expected = (-(seq_ratio * adv)).mean()  # unclipped; grpo aggregation of a per-sequence constant
    assert float(out.loss_sum) / out.num_items == pytest.approx(expected.item(), abs=1e-6)


def test_k3_is_zero_at_reference_and_never_negative():
    g = torch.Generator().manual_seed(0)
    logps = -torch.rand(64, 16, generator=g) * 5
    assert torch.equal(kl_estimate(logps, logps, "k3"), torch.zeros_like(logps))
    assert torch.equal(kl_estimate(logps, logps, "k2"), torch.zeros_like(logps))
    for scale in (1e-4, 0.1, 1.0, 10.0, 50.0):
        ref = logps + torch.randn(64, 16, generator=g) * scale
        assert (kl_estimate(logps, ref, "k3") >= 0).all()
        assert (kl_estimate(logps, ref, "k2") >= 0).all()
    # k1 can be negative, and all three estimate the same KL: E_pi[k] = KL(pi || ref) on a categorical
    p = torch.softmax(torch.randn(6, generator=g), 0)
    q = torch.softmax(torch.randn(6, generator=g), 0)
    true_kl = (p * (p.log() - q.log())).sum()
    for est in ("k1", "k3"):
        assert (p * kl_estimate(p.log(), q.log(), est)).sum() == pytest.approx(true_kl.item(), abs=1e-6)


def test_entropy_bonus_is_subtracted_as_a_token_mean():
    logps, old, _, mask, adv, entropy = _batch(4)
    base = ClippedPolicyLoss(loss_type="dr_grpo", max_completion_length=L)(
        PolicyBatch(logps, mask, adv, old_logprobs=old, entropy=entropy)
    )
    bonus = ClippedPolicyLoss(loss_type="dr_grpo", max_completion_length=L, entropy_coef=0.05)(
        PolicyBatch(logps, mask, adv, old_logprobs=old, entropy=entropy)
    )
    mean_entropy = (entropy * mask).sum() / mask.sum()
    diff = float(base.loss_sum) / base.num_items - float(bonus.loss_sum) / bonus.num_items
    assert diff == pytest.approx(0.05 * mean_entropy.item(), abs=1e-6)
    assert bonus.metrics["entropy"] == pytest.approx(mean_entropy.item(), abs=1e-6)


def test_config_errors_and_family():
    assert isinstance(OBJECTIVES.build({"name": "clipped_policy"}), PolicyObjective)
    assert isinstance(OBJECTIVES.build({"name": "ppo"}), PolicyObjective)
    with pytest.raises(ConfigError, match="loss_type"):
        OBJECTIVES.build({"name": "clipped_policy", "loss_type": "nope"})
    with pytest.raises(ValueError, match="ref_logprobs"):
        logps, _, _, mask, adv, _ = _batch()
        ClippedPolicyLoss(beta=0.1)(PolicyBatch(logps, mask, adv))
    assert ClippedPolicyLoss(beta=0.1).needs_reference and not ClippedPolicyLoss().needs_reference


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(ValueError):
        aggregate(torch.zeros(2, 2), torch.ones(2, 2), "mean")  # type: ignore[arg-type]


# TRL parity -------------------------------------------------------------------------------------------
def _trl_grpo_loss(
    loss_type,
    logps,
    old,
    ref,
    mask,
    adv,
    eps_low,
    eps_high,
    beta,
    level,
    entropies,
    top_entropy_quantile=1.0,
    **args,
):
    """TRL's GRPOTrainer._compute_loss on these tensors; ``args`` set GRPOConfig fields (sapo_*, vespo_*)."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    acc = SimpleNamespace(
        device=torch.device("cpu"),
        num_processes=1,
        gather=lambda x: x,
        reduce=lambda x, reduction="sum": x,
        pad_across_processes=lambda x, dim=0, pad_index=0: x,
        sync_gradients=True,
    )
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, entropies, None),
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        top_entropy_quantile=top_entropy_quantile,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1, **args),
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        max_completion_length=L,
        accelerator=acc,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    fake.get_high_entropy_mask = lambda e, m, t: GRPOTrainer.get_high_entropy_mask(fake, e, m, t)
    inputs = {
        "prompt_ids": torch.ones(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(fake, None, inputs), fake._metrics["train"]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize(("level", "beta"), [("token", 0.0), ("token", 0.04), ("sequence", 0.0)])
def test_grpo_loss_equals_trl(loss_type, level, beta):
    logps, old, ref, mask, adv, entropy = _batch(5, spread=0.6)
    trl_loss, trl_metrics = _trl_grpo_loss(
        loss_type, logps, old, ref, mask, adv, 0.2, 0.28, beta, level, entropy
    )
    out = ClippedPolicyLoss(
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=0.28,
        beta=beta,
        importance_sampling_level=level,
        max_completion_length=L,
    )(PolicyBatch(logps, mask, adv, old_logprobs=old, ref_logprobs=ref, entropy=entropy))
    assert float(out.loss_sum) / out.num_items == pytest.approx(float(trl_loss), abs=1e-6)
    assert out.metrics["clip_ratio/region"] == pytest.approx(
        trl_metrics["clip_ratio/region_mean"][-1], abs=1e-6
    )
    if beta:
        assert out.metrics["kl"] == pytest.approx(trl_metrics["kl"][-1], abs=1e-6)


TRL_ARGS = {
    "sapo_temperature_pos": 1.0,
    "sapo_temperature_neg": 1.05,
    "vespo_k_pos": 2.0,
    "vespo_lambda_pos": 3.0,
    "vespo_k_neg": 3.0,
    "vespo_lambda_neg": 2.0,
}


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "luspo", "vespo", "grpo", "dapo"])
@pytest.mark.parametrize(
    ("level", "beta", "quantile"),
    [("token", 0.0, 1.0), ("token", 0.04, 1.0), ("sequence", 0.0, 1.0), ("token", 0.0, 0.4)],
)
def test_newer_loss_types_and_entropy_quantile_equal_trl(loss_type, level, beta, quantile):
    """cispo, sapo, luspo, vespo (and top_entropy_quantile on every type): loss and gradient = TRL's."""
    logps, old, ref, mask, adv, entropy = _batch(6, spread=0.8)
    eps_high = 5.0 if loss_type == "cispo" else 0.28
    args = dict(TRL_ARGS, sapo_temperature_neg=1.3) if loss_type == "sapo" else TRL_ARGS
    a = logps.clone().requires_grad_(True)
    trl_loss, _ = _trl_grpo_loss(
        loss_type, a, old, ref, mask, adv, 0.2, eps_high, beta, level, entropy, quantile, **args
    )
    trl_loss.backward()
    b = logps.clone().requires_grad_(True)
    objective = ClippedPolicyLoss(
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=eps_high,
        beta=beta,
        importance_sampling_level=level,
        max_completion_length=L,
        top_entropy_quantile=quantile,
        sapo_temperature_neg=args["sapo_temperature_neg"],
    )
    out = objective(PolicyBatch(b, mask, adv, old_logprobs=old, ref_logprobs=ref, entropy=entropy))
    assert out.loss_sum.item() / out.num_items == pytest.approx(trl_loss.item(), rel=1e-6, abs=1e-6)
    (out.loss_sum / out.num_items).backward()
    torch.testing.assert_close(a.grad * mask, b.grad * mask, atol=1e-6, rtol=1e-5)
    assert objective.needs_entropy == (quantile < 1.0)


def test_new_loss_type_settings_are_checked():
    with pytest.raises(ConfigError, match="top_entropy_quantile"):
        ClippedPolicyLoss(top_entropy_quantile=0.0)
    with pytest.raises(ConfigError, match="sapo_temperature"):
        ClippedPolicyLoss(loss_type="sapo", sapo_temperature_neg=0.0)
    with pytest.raises(ValueError, match="entropy"):
        logps, old, _, mask, adv, _ = _batch()
        ClippedPolicyLoss(top_entropy_quantile=0.5)(PolicyBatch(logps, mask, adv, old_logprobs=old))
