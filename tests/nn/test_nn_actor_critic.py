"""actor_critic: CleanRL's orthogonal init, the categorical and diagonal-Gaussian heads, acting on raw
observations with the stored normalisation, saving and loading."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn.models.actor_critic import ActorCritic


def _linears(mlp):
    return [m for m in mlp.net if isinstance(m, torch.nn.Linear)]


def test_orthogonal_init_gains_and_zero_biases():
    torch.manual_seed(0)
    model = MODELS.build({"name": "actor_critic"}, obs_dim=64, num_actions=3, vocab_size=7)
    for mlp, last_gain in ((model.actor, 0.01), (model.critic, 1.0)):
        layers = _linears(mlp)
        assert [tuple(layer.weight.shape) for layer in layers] == [(64, 64), (64, 64), (mlp.out_dim, 64)]
        for i, layer in enumerate(layers):
            gain = last_gain if i == len(layers) - 1 else math.sqrt(2)
            w = layer.weight.detach().double()
            rows = w @ w.T  # orthogonal rows (out <= in): W Wᵀ = gain² I
            torch.testing.assert_close(
                rows, gain**2 * torch.eye(w.shape[0], dtype=torch.float64), atol=1e-5, rtol=0
            )
            assert torch.count_nonzero(layer.bias) == 0
    assert isinstance(model.actor.net[1], torch.nn.Tanh)


def test_categorical_head_matches_torch():
    torch.manual_seed(0)
    model = ActorCritic(4, num_actions=3)
    obs = torch.randn(5, 4)
    action = torch.tensor([0, 1, 2, 1, 0])
    _, logprob, entropy, value = model.get_action_and_value(obs, action)
    ref = Categorical(logits=model.actor(obs))
    torch.testing.assert_close(logprob, ref.log_prob(action))
    torch.testing.assert_close(entropy, ref.entropy())
    torch.testing.assert_close(value, model.critic(obs).squeeze(-1))
    assert torch.equal(model.act(obs), model.actor(obs).argmax(-1))


def test_gaussian_head_sums_over_dimensions_and_clamps_its_mode():
    torch.manual_seed(0)
    model = MODELS.build(
        {"name": "actor_critic", "head": {"name": "policy_head/diag_gaussian", "log_std_init": -0.5}},
        obs_dim=3,
        action_dim=2,
        action_low=[-1.0, -2.0],
        action_high=[1.0, 2.0],
    )
    obs, action = torch.randn(6, 3), torch.randn(6, 2)
    _, logprob, entropy, _ = model.get_action_and_value(obs, action)
    ref = Normal(model.actor(obs), torch.full((6, 2), math.exp(-0.5)))
    torch.testing.assert_close(logprob, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))
    with torch.no_grad():
        model.actor.net[-1].bias.copy_(torch.tensor([5.0, -5.0]))
    assert torch.equal(model.act(obs), torch.tensor([[1.0, -2.0]] * 6))
    sampled, _, none, _ = model.get_action_and_value(obs, entropy=False)
    assert sampled.shape == (6, 2) and none is None


def test_act_normalises_raw_observations_like_gymnasium():
    from gymnasium.wrappers.utils import RunningMeanStd

    torch.manual_seed(0)
    model = ActorCritic(3, num_actions=2)
    rms = RunningMeanStd(shape=(3,))
    rms.update(np.random.default_rng(0).normal(5.0, 3.0, size=(100, 3)))
    model.set_observation_statistics(rms.mean, rms.var, clip=1.0)
    raw = torch.tensor([[5.0, 20.0, -20.0]])
    expected = np.clip((raw.numpy() - rms.mean) / np.sqrt(rms.var + 1e-8), -1.0, 1.0)
    torch.testing.assert_close(model.normalize(raw), torch.as_tensor(expected, dtype=torch.float32))
    assert torch.equal(model.act(raw), model.actor(model.normalize(raw)).argmax(-1))


def test_save_and_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = ActorCritic(3, action_dim=1, action_low=[-2.0], action_high=[2.0], hidden_dims=[16])
    model.set_observation_statistics([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], clip=10.0)
    model.save_pretrained(tmp_path / "m")
    loaded = MODELS.build({"name": "actor_critic", "path": str(tmp_path / "m")}, obs_dim=3)
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    obs = torch.randn(4, 3)
    assert torch.equal(model.act(obs), loaded.act(obs))


def test_needs_exactly_one_kind_of_action():
    with pytest.raises(ConfigError, match="exactly one of num_actions"):
        ActorCritic(4)
    with pytest.raises(ConfigError, match="exactly one of num_actions"):
        ActorCritic(4, num_actions=2, action_dim=1)
