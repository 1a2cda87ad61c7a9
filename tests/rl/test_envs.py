"""Gymnasium environments by id: facts, wrappers, snapshots (bitwise), merged normalisation statistics."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.wrappers.utils import RunningMeanStd

from toolbox.core.errors import CheckpointError, ConfigError
from toolbox.core.registries import ENVS
from toolbox.rl.env_state import load_vector_env_state, observation_statistics, vector_env_state


def _env(**kw):
    return ENVS.build({"name": "gym", **kw})


def test_facts_of_discrete_and_continuous_envs():
    assert _env(id="CartPole-v1").facts == {"obs_dim": 4, "num_actions": 2}
    assert _env(id="Pendulum-v1").facts == {
        "obs_dim": 3,
        "action_dim": 1,
        "action_low": [-2.0],
        "action_high": [2.0],
    }


def test_unknown_id_names_the_closest():
    with pytest.raises(ConfigError, match="'CartPole-v9' is not a registered.*Did you mean 'CartPole-v"):
        _env(id="CartPole-v9")
    with pytest.raises(ConfigError, match="vectorization"):
        _env(id="CartPole-v1", vectorization="threads")


def test_same_step_autoreset_reports_final_obs_and_raw_episode_return():
    spec = _env(id="Pendulum-v1", num_envs=2, normalize_obs=True, normalize_reward=True, clip_reward=10.0)
    envs = spec.make()
    envs.reset(seed=0)
    total = np.zeros(2)
    for _ in range(200):  # Pendulum is truncated at 200 steps
        _, reward, terminated, truncated, infos = envs.step(np.zeros((2, 1), dtype=np.float32))
        total += reward
    envs.close()
    assert truncated.all() and not terminated.any()
    assert infos["_final_obs"].all() and infos["final_obs"][0].shape == (3,)
    raw = infos["final_info"]["episode"]["r"]
    assert raw.shape == (2,) and (raw < -100).all()  # raw Pendulum costs, not the normalised rewards
    assert not np.allclose(total, raw)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_snapshot_restores_every_copy_bitwise(vectorization):
    spec = _env(
        id="CartPole-v1",
        num_envs=2,
        vectorization=vectorization,
        normalize_obs=True,
        normalize_reward=True,
        clip_obs=10.0,
    )
    envs = spec.make()
    envs.reset(seed=3)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(160, 2))
    for a in actions[:60]:
        envs.step(a)
    state = vector_env_state(envs)
    first = [envs.step(a) for a in actions[60:]]  # crosses episode ends (autoreset draws the RNG)
    load_vector_env_state(envs, state)
    second = [envs.step(a) for a in actions[60:]]
    envs.close()
    assert any(t[2].any() for t in first)
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a[:4], b[:4], strict=True):
            np.testing.assert_array_equal(x, y)


def test_snapshot_of_a_mujoco_env_keeps_the_simulator_state():
    pytest.importorskip("mujoco")
    envs = _env(id="HalfCheetah-v5", num_envs=1, normalize_obs=True).make()
    envs.reset(seed=0)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(40, 1, 6)).astype(np.float32)
    for a in actions[:20]:
        envs.step(a)
    state = vector_env_state(envs)
    first = [envs.step(a)[0] for a in actions[20:]]
    load_vector_env_state(envs, state)
    second = [envs.step(a)[0] for a in actions[20:]]
    envs.close()
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)


def test_loading_a_state_of_other_size_is_refused():
    envs = _env(id="CartPole-v1", num_envs=2).make()
    envs.reset(seed=0)
    with pytest.raises(CheckpointError, match="num_envs=2"):
        load_vector_env_state(envs, vector_env_state(envs)[:1])
    envs.close()


def test_observation_statistics_merge_equals_one_estimate_over_all_copies():
    spec = _env(id="CartPole-v1", num_envs=3, normalize_obs=True)
    envs = spec.make()
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        envs.step(rng.integers(0, 2, size=3))
    stats = envs.get_attr("obs_rms")
    mean, var = observation_statistics(envs)
    envs.close()
    joint = RunningMeanStd(shape=(4,))  # the parallel-variance merge, by gymnasium's own update
    joint.mean, joint.var, joint.count = stats[0].mean.copy(), stats[0].var.copy(), stats[0].count
    for rms in stats[1:]:
        joint.update_from_moments(rms.mean, rms.var, rms.count)
    np.testing.assert_allclose(mean, joint.mean, rtol=1e-12)
    np.testing.assert_allclose(var, joint.var, rtol=1e-12)
    assert observation_statistics(_env(id="CartPole-v1").make()) is None
