"""Every DPOTrainer loss type of TRL 1.16, its f-divergences and a weighted mix, against TRL's own
``DPOTrainer._compute_loss`` on the same tensors (the harness of test_preference_parity). 1e-6."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.dpo_family import LOSS_TYPES, DPOMixLoss

pytest.importorskip("trl")

from test_preference_parity import ATOL, _ours, _pairs, _trl_dpo_loss  # noqa: E402  (same folder)

SMOOTHING = {"robust": 0.2, "exo_pair": 1e-3, "aot": 0.1, "aot_unpaired": 0.05}


def _trl(loss_types, weights, beta, eps, per_token, attention, completion_mask, ref, **fields):
    """TRL's loss with a list of loss types and any other DPOTrainer attribute overridden."""
    import trl.trainer.dpo_trainer as dpo_trainer
    from trl import DPOTrainer

    original = DPOTrainer._compute_loss

    def patched(fake, model, inputs, return_outputs):
        fake.loss_types, fake.loss_weights = list(loss_types), list(weights)
        for k, v in fields.items():
            setattr(fake, k, v)
        fake.args.discopop_tau = fields.get("discopop_tau", 0.05)
        return original(fake, model, inputs, return_outputs)

    dpo_trainer.DPOTrainer._compute_loss = patched
    try:
        return _trl_dpo_loss(loss_types[0], beta, eps, per_token, attention, completion_mask, ref)
    finally:
        dpo_trainer.DPOTrainer._compute_loss = original


@pytest.mark.parametrize("loss_type", sorted(LOSS_TYPES))
@pytest.mark.parametrize(("beta", "seed"), [(0.1, 0), (0.6, 1)])
def test_each_loss_type_equals_trl(loss_type, beta, seed):
    per_token, attention, completion_mask, ref = _pairs(seed)
    eps = SMOOTHING.get(loss_type, 0.0)
    a = per_token.clone().requires_grad_(True)
    trl_loss, trl_metrics = _trl([loss_type], [1.0], beta, eps, a, attention, completion_mask, ref)
    trl_loss.backward()
    b = per_token.clone().requires_grad_(True)
    out = DPOMixLoss(loss_type, beta=beta, label_smoothing=eps)(_ours(b, completion_mask, ref))
    (out.loss_sum / out.num_items).backward()
    assert out.loss_sum.item() / out.num_items == pytest.approx(trl_loss.item(), rel=1e-6, abs=ATOL)
    # TRL's sft indexes the completion tokens; our sums read only them too (the fixture's padding is 0)
    scored = completion_mask[:, 1:].bool()
    torch.testing.assert_close(a.grad[scored], b.grad[scored], atol=ATOL, rtol=0)
    for key in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
        assert out.metrics[key] == pytest.approx(trl_metrics[key], abs=ATOL), key


@pytest.mark.parametrize(
    ("divergence", "alpha"),
    [("forward_kl", 0.5), ("js_divergence", 0.5), ("alpha_divergence", 0.5), ("alpha_divergence", 0.3)],
)
@pytest.mark.parametrize(
    "loss_type", ["sigmoid", "sigmoid_norm", "hinge", "ipo", "robust", "discopop", "sft"]
)
def test_f_divergences_equal_trl(divergence, alpha, loss_type):
    per_token, attention, completion_mask, ref = _pairs(2)
    per_token, ref = per_token * 0.1, ref * 0.1  # log-ratios of a few nats: exp(-u) stays finite
    eps = SMOOTHING.get(loss_type, 0.0)
    trl_loss, _ = _trl(
        [loss_type],
        [1.0],
        0.3,
        eps,
        per_token,
        attention,
        completion_mask,
        ref,
        f_divergence_type=divergence,
        f_alpha_divergence_coef=alpha,
    )
    out = DPOMixLoss(
        loss_type, beta=0.3, label_smoothing=eps, f_divergence_type=divergence, f_alpha_divergence_coef=alpha
    )(_ours(per_token, completion_mask, ref))
    assert out.loss_sum.item() / out.num_items == pytest.approx(trl_loss.item(), rel=1e-6, abs=ATOL)


def test_weighted_mix_equals_trl_mpo():
    """MPO: sigmoid + bco_pair + sft with weights, and discopop's tau."""
    per_token, attention, completion_mask, ref = _pairs(4)
    types, weights = ["sigmoid", "bco_pair", "sft", "discopop"], [0.8, 0.2, 1.0, 0.5]
    a = per_token.clone().requires_grad_(True)
    trl_loss, _ = _trl(types, weights, 0.2, 0.0, a, attention, completion_mask, ref, discopop_tau=0.1)
    trl_loss.backward()
    b = per_token.clone().requires_grad_(True)
    out = OBJECTIVES.build(
        {"name": "dpo_mix", "loss_type": types, "loss_weights": weights, "beta": 0.2, "discopop_tau": 0.1}
    )(_ours(b, completion_mask, ref))
    (out.loss_sum / out.num_items).backward()
    assert out.loss_sum.item() / out.num_items == pytest.approx(trl_loss.item(), rel=1e-6, abs=ATOL)
    scored = completion_mask[:, 1:].bool()
    torch.testing.assert_close(a.grad[scored], b.grad[scored], atol=ATOL, rtol=0)
    assert set(out.metrics) >= {f"loss/{t}" for t in types}


@pytest.mark.parametrize(
    "name",
    [
        "exo_pair",
        "nca_pair",
        "bco_pair",
        "sppo_hard",
        "aot",
        "aot_unpaired",
        "apo_zero",
        "apo_down",
        "discopop",
        "sigmoid_norm",
    ],
)
def test_each_type_is_registered_under_its_trl_name(name):
    per_token, _, completion_mask, ref = _pairs(5)
    x = _ours(per_token, completion_mask, ref)
    single = OBJECTIVES.build({"name": name, "beta": 0.3})
    mixed = DPOMixLoss(name, beta=0.3, label_smoothing=getattr(single, "label_smoothing", 0.0))
    assert float(single(x).loss_sum) == float(mixed(x).loss_sum)
    assert single.needs_reference


def test_bad_settings_name_the_fix():
    with pytest.raises(ConfigError, match="choose from sigmoid"):
        DPOMixLoss("sigmoidd")
    with pytest.raises(ConfigError, match="2 weights for 1 loss types"):
        DPOMixLoss("sigmoid", loss_weights=[1.0, 2.0])
    with pytest.raises(ConfigError, match="applies only to"):
        DPOMixLoss("bco_pair", f_divergence_type="forward_kl")
    with pytest.raises(ConfigError, match="choose reverse_kl"):
        DPOMixLoss("sigmoid", f_divergence_type="kl")
    with pytest.raises(ConfigError, match="exo_pair needs"):
        DPOMixLoss("exo_pair", label_smoothing=0.0)
