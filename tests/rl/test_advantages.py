"""Advantage estimators: TRL's group formula, RLOO, REINFORCE++, GAE against CleanRL's loop."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import ADVANTAGES


def _build(name, **kw):
    return ADVANTAGES.build({"name": name, **kw})


def test_group_norm_matches_trl_numbers():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv = _build("group_norm", scale="group")(rewards, num_generations=4)
    torch.testing.assert_close(adv, torch.tensor([0.86588, -0.86588, -0.86588, 0.86588]), atol=1e-5, rtol=0)
    unscaled = _build("group_norm", scale="none")(rewards, num_generations=4)
    torch.testing.assert_close(unscaled, torch.tensor([0.5, -0.5, -0.5, 0.5]))


def _trl_formula(rewards, g, scale):
    """trl/trainer/grpo_trainer.py, sum_then_normalize, written out with trl's own nanstd."""
    from trl.trainer.utils import nanstd

    mean = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g)
    if scale == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g)
    adv = rewards - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_norm_equals_trl_formula(scale):
    pytest.importorskip("trl")
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=g).round(decimals=1)
    rewards[5] = float("nan")  # an unscorable completion: excluded from the statistics, advantage 0
    ours = _build("group_norm", scale=scale)(rewards, num_generations=6)
    torch.testing.assert_close(ours, _trl_formula(rewards, 6, scale), atol=1e-6, rtol=0)
    assert ours[5] == 0


def test_group_of_equal_rewards_has_zero_advantage():
    adv = _build("group_norm")(torch.tensor([2.0, 2.0, 2.0, 0.0, 1.0, 2.0]), num_generations=3)
    assert torch.equal(adv[:3], torch.zeros(3))


def test_rloo_is_leave_one_out():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0])
    adv = _build("rloo")(rewards, num_generations=3)
    expected = [1 - 0, 0 - 0.5, 0 - 0.5, 1 - 2, 3 - 1, 1 - 2]
    torch.testing.assert_close(adv, torch.tensor(expected))
    # leave-one-out = G/(G-1) x (r - group mean)
    centred = rewards.view(2, 3) - rewards.view(2, 3).mean(1, keepdim=True)
    torch.testing.assert_close(adv, (centred * 3 / 2).flatten())
    with pytest.raises(ConfigError):
        _build("rloo")(rewards, num_generations=1)


def test_reinforce_pp_whitens_over_the_batch():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    adv = _build("reinforce_pp")(rewards, num_generations=3)
    assert adv.mean().abs() < 1e-6 and adv.std().item() == pytest.approx(1.0, abs=1e-3)
    base = _build("reinforce_pp", baseline="group")(rewards, num_generations=3)
    centred = rewards.view(2, 3) - rewards.view(2, 3).mean(1, keepdim=True)
    torch.testing.assert_close(base, (centred.flatten() - centred.mean()) / (centred.flatten().std() + 1e-4))


def test_group_size_must_divide():
    with pytest.raises(ValueError, match="num_generations"):
        _build("group_norm")(torch.zeros(5), num_generations=2)


def _cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """cleanrl/ppo.py, verbatim in structure."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return advantages, advantages + values


def test_gae_equals_cleanrl():
    g = torch.Generator().manual_seed(1)
    steps, envs = 16, 3
    rewards, values = torch.randn(steps, envs, generator=g), torch.randn(steps, envs, generator=g)
    dones = (torch.rand(steps, envs, generator=g) < 0.2).float()
    next_value, next_done = torch.randn(envs, generator=g), torch.tensor([0.0, 1.0, 0.0])
    adv, ret = _build("gae", gamma=0.97, lam=0.9)(rewards, values, dones, next_value, next_done)
    exp_adv, exp_ret = _cleanrl_gae(rewards, values, dones, next_value, next_done, 0.97, 0.9)
    torch.testing.assert_close(adv, exp_adv)
    torch.testing.assert_close(ret, exp_ret)


def test_gae_lambda_one_is_discounted_return_minus_value():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [0.2], [0.1]])
    adv, _ = _build("gae", gamma=0.5, lam=1.0)(
        rewards, values, torch.zeros(3, 1), torch.zeros(1), torch.ones(1)
    )
    returns = torch.tensor([[1 + 0.5 * 2 + 0.25 * 3], [2 + 0.5 * 3], [3.0]])
    torch.testing.assert_close(adv, returns - values)


def test_registry_lists_estimators():
    assert {"group_norm", "rloo", "reinforce_pp", "gae"} <= set(ADVANTAGES.names())
    with pytest.raises(ConfigError, match="scale"):
        _build("group_norm", scale="median")


def test_gae_keeps_termination_and_truncation_apart_hand_computed():
    """One env (column 0) terminates at step 1 and is truncated at step 2 (final obs value 4),
    another (column 1) runs on; gamma = lam = 0.5. By hand, backwards:

    column 0: t=3  δ = 4 + .5·8 − 2 = 6                                   A = 6
              t=2  truncated: δ = 3 + .5·V(final)=.5·4 − 1.5 = 3.5, chain cut    A = 3.5
              t=1  terminated: δ = 2 − 1 = 1, chain cut                        A = 1
              t=0  δ = 1 + .5·1 − .5 = 1;  A = 1 + .25·1 = 1.25
    column 1: δ = 1 at every step (V = 0):  A3 = 1, A2 = 1.25, A1 = 1.3125, A0 = 1.328125
    Without the truncation tensors (CleanRL) t=2 of column 0 is δ = 3 − 1.5 = 1.5."""
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])  # obs t starts an episode
    truncated = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    final_values = torch.tensor([[0.0, 0.0], [0.0, 0.0], [4.0, 0.0], [0.0, 0.0]])
    next_value, next_done = torch.tensor([8.0, 0.0]), torch.tensor([0.0, 0.0])
    gae = _build("gae", gamma=0.5, lam=0.5)

    adv, ret = gae(rewards, values, dones, next_value, next_done, truncated, final_values)
    expected = torch.tensor([[1.25, 1.328125], [1.0, 1.3125], [3.5, 1.25], [6.0, 1.0]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)
    torch.testing.assert_close(ret, expected + values, rtol=0, atol=0)

    cleanrl, _ = gae(rewards, values, dones, next_value, next_done)
    expected[2, 0] = 1.5
    torch.testing.assert_close(cleanrl, expected, rtol=0, atol=0)

    with pytest.raises(ValueError, match="together"):
        gae(rewards, values, dones, next_value, next_done, truncated, None)
