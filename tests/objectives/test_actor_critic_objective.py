"""ppo_actor_critic: CleanRL's ppo.py minibatch loss, term by term."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.nn.models.actor_critic import ActorCritic


def _cleanrl_loss(model, b, clip_coef, ent_coef, vf_coef, clip_vloss):
    """cleanrl/ppo.py's update, verbatim but for the variable names."""
    _, newlogprob, entropy, newvalue = model.get_action_and_value(b["obs"], b["action"])
    logratio = newlogprob - b["logprob"]
    ratio = logratio.exp()
    approx_kl = ((ratio - 1) - logratio).mean()
    mb_advantages = b["advantage"]
    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss = torch.max(
        -mb_advantages * ratio, -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    ).mean()
    newvalue = newvalue.view(-1)
    if clip_vloss:
        v_loss_unclipped = (newvalue - b["return"]) ** 2
        v_clipped = b["value"] + torch.clamp(newvalue - b["value"], -clip_coef, clip_coef)
        v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - b["return"]) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - b["return"]) ** 2).mean()
    return pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef, pg_loss, v_loss, approx_kl


@pytest.mark.parametrize("clip_vloss", [True, False])
def test_loss_equals_cleanrl(clip_vloss):
    torch.manual_seed(0)
    model = ActorCritic(4, num_actions=3)
    n = 32
    obs = torch.randn(n, 4)
    with torch.no_grad():
        action, logprob, _, value = model.get_action_and_value(obs)
    batch = {
        "obs": obs,
        "action": action,
        "logprob": logprob + 0.3 * torch.randn(n),  # an older policy: ratios away from 1, some clipped
        "value": value + torch.randn(n),
        "advantage": torch.randn(n) * 2 + 0.5,
        "return": torch.randn(n) * 3,
    }
    objective = OBJECTIVES.build(
        {
            "name": "ppo_actor_critic",
            "clip_coef": 0.2,
            "ent_coef": 0.01,
            "vf_coef": 0.5,
            "clip_vloss": clip_vloss,
        }
    )
    out = objective(model, batch)
    ref, pg, v, kl = _cleanrl_loss(model, batch, 0.2, 0.01, 0.5, clip_vloss)
    assert out.num_items == n
    torch.testing.assert_close(out.loss_sum / out.num_items, ref, rtol=1e-6, atol=1e-6)
    assert out.metrics["pg_loss"] == pytest.approx(float(pg.detach()), rel=1e-5)
    assert out.metrics["v_loss"] == pytest.approx(float(v.detach()), rel=1e-5)
    assert out.metrics["approx_kl"] == pytest.approx(float(kl.detach()), rel=1e-5)
    assert 0.0 < out.metrics["clipfrac"] < 1.0
    (out.loss_sum / out.num_items).backward()  # the gradient flows to both networks
    assert model.actor.net[0].weight.grad.abs().sum() > 0 and model.critic.net[0].weight.grad.abs().sum() > 0


def test_rejects_a_non_positive_clip():
    with pytest.raises(ConfigError, match="clip_coef"):
        OBJECTIVES.build({"name": "ppo_actor_critic", "clip_coef": 0.0})
