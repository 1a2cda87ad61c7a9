"""Every preference loss TRL 1.16 has equals TRL's, computed by TRL's own code on the same tensors.

TRL's losses live inside its trainers (``DPOTrainer._compute_loss``, ``KTOTrainer._compute_loss``,
``CPOTrainer.cpo_loss``, ``ORPOTrainer.odds_ratio_loss``); we call those functions with a minimal
stand-in for the trainer (``self``) and for the model, whose forward returns the per-token
log-probs we choose. Tolerance: 1e-6.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from toolbox.objectives.kto import KTOLoss
from toolbox.objectives.preference import (
    DPOLoss,
    HingeLoss,
    IPOLoss,
    ORPOLoss,
    PreferenceLogps,
    RobustDPOLoss,
    SimPOLoss,
)

pytest.importorskip("trl")

B, T = 6, 9
ATOL = 1e-6


def _accelerator():
    return SimpleNamespace(
        device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x, num_processes=1
    )


def _pairs(seed: int = 0):
    """Per-token log-probs [2B, T-1] of a batch of B pairs (chosen rows first), its masks and refs."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 4, (2 * B,), generator=g)
    completion = torch.randint(1, T - 3, (2 * B,), generator=g)
    pos = torch.arange(T)[None, :]
    attention = (pos < (prompt + completion)[:, None]).long()
    completion_mask = ((pos >= prompt[:, None]) & (attention == 1)).long()
    per_token = -torch.rand(2 * B, T - 1, generator=g, dtype=torch.float64).float() * 3
    per_token = per_token * completion_mask[:, 1:]
    ref = -torch.rand(2 * B, generator=g) * 3 * completion.float() / 2
    return per_token, attention, completion_mask, ref


def _ours(per_token, completion_mask, ref) -> PreferenceLogps:
    sums, lengths = per_token.sum(-1), completion_mask.sum(-1).float()
    return PreferenceLogps(
        chosen_logps=sums[:B],
        rejected_logps=sums[B:],
        chosen_lengths=lengths[:B],
        rejected_lengths=lengths[B:],
        ref_chosen_logps=ref[:B],
        ref_rejected_logps=ref[B:],
    )


def _trl_dpo_loss(
    loss_type: str, beta: float, label_smoothing: float, per_token, attention, completion_mask, ref
):
    from trl import DPOTrainer

    outputs = SimpleNamespace(
        log_probs=per_token,
        entropy=torch.zeros_like(per_token),
        mean_logits=torch.zeros_like(per_token),
        is_top1=torch.zeros_like(per_token, dtype=torch.bool),
    )
    model = lambda **kw: outputs  # noqa: E731
    fake = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=_accelerator(),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=beta,
        label_smoothing=label_smoothing,
        use_weighting=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
    )
    inputs = {
        "input_ids": torch.ones_like(attention),
        "attention_mask": attention,
        "completion_mask": completion_mask,
        "ref_chosen_logps": ref[:B],
        "ref_rejected_logps": ref[B:],
    }
    loss = DPOTrainer._compute_loss(fake, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in fake._metrics["train"].items()}


def _mean(out) -> float:
    return float(out.loss_sum) / out.num_items


@pytest.mark.parametrize(
    ("trl_type", "ours", "beta", "eps"),
    [
        ("sigmoid", DPOLoss, 0.1, 0.0),
        ("sigmoid", DPOLoss, 0.5, 0.0),
        ("hinge", HingeLoss, 0.1, 0.0),
        ("hinge", HingeLoss, 0.7, 0.0),
        ("ipo", IPOLoss, 0.1, 0.0),
        ("ipo", IPOLoss, 1.3, 0.0),
        ("robust", RobustDPOLoss, 0.1, 0.1),
        ("robust", RobustDPOLoss, 0.3, 0.25),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_dpo_family_equals_trl(trl_type, ours, beta, eps, seed):
    per_token, attention, completion_mask, ref = _pairs(seed)
    trl_loss, trl_metrics = _trl_dpo_loss(trl_type, beta, eps, per_token, attention, completion_mask, ref)
    objective = ours(beta=beta, label_smoothing=eps) if ours is RobustDPOLoss else ours(beta=beta)
    out = objective(_ours(per_token, completion_mask, ref))
    assert _mean(out) == pytest.approx(float(trl_loss), abs=ATOL)
    for key in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
        assert out.metrics[key] == pytest.approx(trl_metrics[key], abs=ATOL), key


def test_dpo_gradient_equals_trl():
    per_token, attention, completion_mask, ref = _pairs(3)
    a = per_token.clone().requires_grad_(True)
    trl_loss, _ = _trl_dpo_loss("sigmoid", 0.2, 0.0, a, attention, completion_mask, ref)
    trl_loss.backward()
    b = per_token.clone().requires_grad_(True)
    out = DPOLoss(beta=0.2)(_ours(b, completion_mask, ref))
    (out.loss_sum / out.num_items).backward()
    torch.testing.assert_close(a.grad, b.grad, atol=ATOL, rtol=0)


def _cpo(loss_type: str, beta: float, eps: float, gamma: float = 0.5):
    return SimpleNamespace(
        alpha=0.0,
        loss_type=loss_type,
        beta=beta,
        label_smoothing=eps,
        simpo_gamma=gamma,
        accelerator=_accelerator(),
    )


@pytest.mark.parametrize(("beta", "gamma", "eps"), [(2.0, 0.5, 0.0), (2.5, 1.0, 0.0), (1.0, 0.3, 0.1)])
def test_simpo_equals_trl_cpo_simpo(beta, gamma, eps):
    from trl.experimental.cpo import CPOTrainer

    per_token, _, completion_mask, ref = _pairs(4)
    x = _ours(per_token, completion_mask, ref)
    avg_c, avg_r = x.chosen_logps / x.chosen_lengths, x.rejected_logps / x.rejected_lengths
    losses, chosen_rewards, rejected_rewards = CPOTrainer.cpo_loss(
        _cpo("simpo", beta, eps, gamma), avg_c, avg_r
    )
    out = SimPOLoss(beta=beta, gamma=gamma, label_smoothing=eps)(x)
    assert _mean(out) == pytest.approx(losses.mean().item(), abs=ATOL)
    assert out.metrics["rewards/chosen"] == pytest.approx(chosen_rewards.mean().item(), abs=ATOL)
    assert out.metrics["rewards/margins"] == pytest.approx(
        (chosen_rewards - rejected_rewards).mean().item(), abs=ATOL
    )


@pytest.mark.parametrize(("beta", "eps"), [(0.1, 0.1), (0.5, 0.3)])
def test_cdpo_label_smoothing_equals_trl_smoothed_sigmoid(beta, eps):
    """DPO 1.16 dropped label smoothing from "sigmoid"; CPO's smoothed sigmoid on the log-ratios is cDPO."""
    from trl.experimental.cpo import CPOTrainer

    per_token, _, completion_mask, ref = _pairs(5)
    x = _ours(per_token, completion_mask, ref)
    losses, _, _ = CPOTrainer.cpo_loss(
        _cpo("sigmoid", beta, eps),
        x.chosen_logps - x.ref_chosen_logps,
        x.rejected_logps - x.ref_rejected_logps,
    )
    assert _mean(DPOLoss(beta=beta, label_smoothing=eps)(x)) == pytest.approx(losses.mean().item(), abs=ATOL)


@pytest.mark.parametrize("beta", [0.1, 0.25])
def test_orpo_odds_ratio_equals_trl(beta):
    from trl.experimental.orpo import ORPOTrainer

    per_token, _, completion_mask, ref = _pairs(6)
    x = _ours(per_token, completion_mask, ref)
    avg_c, avg_r = x.chosen_logps / x.chosen_lengths, x.rejected_logps / x.rejected_lengths
    fake = SimpleNamespace(beta=beta, accelerator=_accelerator())
    losses, chosen_rewards, _, log_odds_ratio, log_odds_chosen = ORPOTrainer.odds_ratio_loss(
        fake, avg_c, avg_r
    )
    nll = -x.chosen_logps.sum() / x.chosen_lengths.sum()  # ours: the chosen completions' mean token NLL
    out = ORPOLoss(beta=beta)(x)
    assert _mean(out) == pytest.approx((nll - losses.mean()).item(), abs=ATOL)  # TRL: nll - losses.mean()
    assert out.metrics["log_odds_ratio"] == pytest.approx(log_odds_ratio.item(), abs=ATOL)
    assert out.metrics["log_odds_chosen"] == pytest.approx(log_odds_chosen.item(), abs=ATOL)
    assert out.metrics["rewards/chosen"] == pytest.approx(chosen_rewards.mean().item(), abs=ATOL)


@pytest.mark.parametrize(("beta", "wd", "wu"), [(0.1, 1.0, 1.0), (0.3, 1.0, 1.33)])
def test_kto_equals_trl(beta, wd, wu):
    per_token, attention, completion_mask, ref = _pairs(7)
    g = torch.Generator().manual_seed(8)
    kl_logps = -torch.rand(B, generator=g) * 6
    ref_kl_logps = -torch.rand(B, generator=g) * 6
    labels = torch.tensor([True] * B + [False] * B)
    trl_loss, trl_metrics = _trl_kto(
        per_token, attention, completion_mask, ref, labels, kl_logps, ref_kl_logps, beta, wd, wu
    )
    x = _ours(per_token, completion_mask, ref)
    x.kl_logps, x.ref_kl_logps = kl_logps, ref_kl_logps
    out = KTOLoss(beta=beta, desirable_weight=wd, undesirable_weight=wu)(x)
    assert _mean(out) == pytest.approx(float(trl_loss), abs=ATOL)
    assert out.metrics["kl"] == pytest.approx(trl_metrics["kl"], abs=ATOL)


def test_bradley_terry_equals_trl_reward_formula():
    from toolbox.objectives.preference import BradleyTerryLoss

    g = torch.Generator().manual_seed(9)
    sc, sr, margin = torch.randn(B, generator=g), torch.randn(B, generator=g), torch.rand(B, generator=g)
    out = BradleyTerryLoss(center_rewards_coefficient=0.01)(
        PreferenceLogps(chosen_scores=sc, rejected_scores=sr, margin=margin)
    )
    # trl/trainer/reward_trainer.py compute_loss, with a margin and center_rewards_coefficient
    expected = -F.logsigmoid(sc - sr - margin).mean() + 0.01 * torch.mean((sc + sr) ** 2)
    assert _mean(out) == pytest.approx(expected.item(), abs=ATOL)


def _trl_kto(per_token, attention, completion_mask, ref, labels, kl_logps, ref_kl_logps, beta, wd, wu):
    """TRL's KTOTrainer._compute_loss on unpaired rows (in any label order) and its logged metrics."""
    from trl import KTOTrainer

    outputs = SimpleNamespace(
        log_probs=per_token,
        entropy=torch.zeros_like(per_token),
        mean_logits=torch.zeros_like(per_token),
        is_top1=torch.zeros_like(per_token, dtype=torch.bool),
    )
    fake = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=_accelerator(),
        aux_loss_enabled=False,
        precompute_ref_logps=True,
        calculate_KL=True,
        loss_type="kto",
        beta=beta,
        desirable_weight=wd,
        undesirable_weight=wu,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
        _compute_kl_logps=lambda model, batch: kl_logps,
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
    )
    batch = {
        "input_ids": torch.ones_like(attention),
        "attention_mask": attention,
        "completion_mask": completion_mask,
        "label": labels,
        "ref_logps": ref,
        "ref_KL_logps": ref_kl_logps,
    }
    loss = KTOTrainer._compute_loss(fake, lambda **kw: outputs, batch, return_outputs=False)
    return loss, {k: v[-1] for k, v in fake._metrics["train"].items()}


@pytest.mark.parametrize(
    ("beta", "wd", "wu", "seed"),
    [(0.1, 1.0, 1.0, 0), (0.3, 1.0, 1.33, 1), (0.5, 1.2, 0.8, 2), (0.2, 1.0, 1.0, 3)],
)
def test_kto_unpaired_equals_trl(beta, wd, wu, seed):
    """Unpaired rows with labels in mixed order (seed 3: all desirable), our loss and metrics = TRL's."""
    per_token, attention, completion_mask, ref = _pairs(10 + seed)
    n = per_token.shape[0]
    g = torch.Generator().manual_seed(20 + seed)
    labels = torch.rand(n, generator=g) < 0.5 if seed != 3 else torch.ones(n, dtype=torch.bool)
    kl_logps = -torch.rand(n, generator=g) * 6
    ref_kl_logps = -torch.rand(n, generator=g) * 6
    a = per_token.clone().requires_grad_(True)
    trl_loss, trl_metrics = _trl_kto(
        a, attention, completion_mask, ref, labels, kl_logps, ref_kl_logps, beta, wd, wu
    )
    trl_loss.backward()
    b = per_token.clone().requires_grad_(True)
    x = PreferenceLogps(
        logps=b.sum(-1),
        ref_logps=ref,
        lengths=completion_mask.sum(-1).float(),
        desirable=labels,
        kl_logps=kl_logps,
        ref_kl_logps=ref_kl_logps,
    )
    out = KTOLoss(beta=beta, desirable_weight=wd, undesirable_weight=wu)(x)
    (out.loss_sum / out.num_items).backward()
    assert out.loss_sum.item() / out.num_items == pytest.approx(trl_loss.item(), abs=ATOL)
    torch.testing.assert_close(a.grad, b.grad, atol=ATOL, rtol=0)
    keys = ("kl", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "rewards/margins")
    assert {k for k in keys if k in trl_metrics} == {k for k in keys if k in out.metrics}
    for key in keys:
        if key in trl_metrics:
            assert out.metrics[key] == pytest.approx(trl_metrics[key], abs=1e-5), key
    assert out.metrics["count/chosen"] == int(labels.sum())
    assert out.metrics["count/rejected"] == n - int(labels.sum())
