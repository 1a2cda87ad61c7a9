"""Gymnasium environments by id (``ENVS``), vectorised, with CleanRL's wrappers, and their facts.

``env: {name: gym, id: CartPole-v1, num_envs: 4}`` builds a :class:`GymEnv`: a recipe, not yet an
environment. The builder reads its :attr:`GymEnv.facts` (``obs_dim`` and ``num_actions``, or
``action_dim``/``action_low``/``action_high``) and injects them into the model as it injects data
facts; the trainer calls :meth:`GymEnv.make` for the vectorised training environments and the
evaluator :meth:`GymEnv.make_eval` for one un-normalised environment::

    spec = ENVS.build({"name": "gym", "id": "Pendulum-v1", "num_envs": 4, "normalize_obs": True})
    spec.facts                      # {"obs_dim": 3, "action_dim": 1, "action_low": [-2.0], ...}
    envs = spec.make(seed=0)        # gymnasium VectorEnv, SAME_STEP autoreset
    obs, info = envs.reset(seed=0)  # sub-env i is seeded seed + i, as CleanRL does

Every sub-environment is wrapped as in CleanRL (``ppo.py``, ``ppo_continuous_action.py``), inside
out: ``gym.make(id)`` (with its TimeLimit) → FlattenObservation (unless already flat) → RecordEpisodeStatistics (raw
returns, before any normalisation) → ClipAction (continuous actions) → NormalizeObservation →
clip observations → NormalizeReward → clip rewards → :class:`~toolbox.rl.env_state.Snapshot`
(outermost: the sub-environment's whole state as bytes, for checkpoints). The normalisation
statistics are per sub-environment, as in CleanRL.

Autoreset is gymnasium's SAME_STEP mode: the step that ends an episode returns the next episode's
first observation and puts the last one in ``info["final_obs"]`` (normalised like every
observation), so a trainer can bootstrap a truncated episode from ``V(final_obs)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import numpy as np

from toolbox.core.errors import ConfigError
from toolbox.core.registries import ENVS


def _clip(x: Any, bound: float) -> Any:
    return np.clip(x, -bound, bound)


def make_single(
    id: str,
    kwargs: dict[str, Any],
    max_episode_steps: int | None,
    normalize_obs: bool,
    normalize_reward: bool,
    clip_obs: float | None,
    clip_reward: float | None,
    gamma: float,
    snapshot: bool = True,
) -> Any:
    """One sub-environment with the wrapper chain of the module docstring (picklable: no lambdas)."""
    import gymnasium as gym
    from gymnasium import wrappers

    from toolbox.rl.env_state import Snapshot

    env = gym.make(id, max_episode_steps=max_episode_steps, **kwargs)
    if (
        len(env.observation_space.shape or ()) != 1
    ):  # a flat Box needs no flattening (a wrapper less per step)
        env = wrappers.FlattenObservation(env)
    env = wrappers.RecordEpisodeStatistics(env)
    if isinstance(env.action_space, gym.spaces.Box):
        env = wrappers.ClipAction(env)
    if normalize_obs:
        env = wrappers.NormalizeObservation(env)
    if clip_obs is not None:
        env = wrappers.TransformObservation(
            env, functools.partial(_clip, bound=clip_obs), env.observation_space
        )
    if normalize_reward:
        env = wrappers.NormalizeReward(env, gamma=gamma)
    if clip_reward is not None:
        env = wrappers.TransformReward(env, functools.partial(_clip, bound=clip_reward))
    return Snapshot(env) if snapshot else env


@ENVS.register("gym")
class GymEnv:
    """A gymnasium environment by id, vectorised over ``num_envs`` copies.

    Args:
        id: a registered gymnasium id (``CartPole-v1``, ``Acrobot-v1``, ``Pendulum-v1``,
            ``HalfCheetah-v5`` with ``mujoco`` installed).
        num_envs: parallel copies stepped together.
        vectorization: ``sync`` (all copies in this process, best for cheap envs) or ``async``
            (one worker process per copy, for envs whose step dominates).
        max_episode_steps: override the id's time limit (None: the registered one).
        normalize_obs: normalise observations by running statistics (per copy, as CleanRL).
        normalize_reward: scale rewards by the running std of the discounted return.
        clip_obs: clip (normalised) observations to [-clip_obs, clip_obs] (None: no clipping).
        clip_reward: clip (normalised) rewards to [-clip_reward, clip_reward] (None: none).
        gamma: the discount of reward normalisation's return (use the trainer's gamma).
        kwargs: keyword arguments of ``gym.make`` (e.g. ``{"ctrl_cost_weight": 0.1}``).
    """

    def __init__(
        self,
        id: str,
        num_envs: int = 4,
        vectorization: Literal["sync", "async"] = "sync",
        max_episode_steps: int | None = None,
        normalize_obs: bool = False,
        normalize_reward: bool = False,
        clip_obs: float | None = None,
        clip_reward: float | None = None,
        gamma: float = 0.99,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        import gymnasium as gym

        if num_envs < 1:
            raise ConfigError(f"env.num_envs: must be at least 1, got {num_envs}.")
        if vectorization not in ("sync", "async"):
            raise ConfigError(f"env.vectorization: {vectorization!r}; choose sync or async.")
        if id not in gym.registry:
            import difflib

            close = difflib.get_close_matches(id, list(gym.registry), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            extra = " (MuJoCo envs need `pip install mujoco`)" if "-v" in id else ""
            raise ConfigError(f"env.id: '{id}' is not a registered gymnasium environment.{hint}{extra}")
        self.id = id
        self.num_envs = num_envs
        self.vectorization = vectorization
        self._make_args = {
            "id": id,
            "kwargs": dict(kwargs or {}),
            "max_episode_steps": max_episode_steps,
            "normalize_obs": normalize_obs,
            "normalize_reward": normalize_reward,
            "clip_obs": clip_obs,
            "clip_reward": clip_reward,
            "gamma": gamma,
        }
        self.normalize_obs = normalize_obs
        self.clip_obs = clip_obs
        probe = make_single(**self._make_args, snapshot=False)
        try:
            self.observation_space = probe.observation_space
            self.action_space = probe.unwrapped.action_space  # the bounds (ClipAction makes them ±inf)
        finally:
            probe.close()
        self.facts = space_facts(self.observation_space, self.action_space, id)

    def make(self, seed: int | None = None, num_envs: int | None = None) -> Any:
        """The vectorised training environments (not yet reset)."""
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        fns = [functools.partial(make_single, **self._make_args) for _ in range(num_envs or self.num_envs)]
        cls = gym.vector.SyncVectorEnv if self.vectorization == "sync" else gym.vector.AsyncVectorEnv
        return cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)

    def make_eval(self) -> Any:
        """One environment for evaluation: the same wrappers without any normalisation (the policy
        normalises raw observations itself, with the statistics the trainer gave it)."""
        args = {**self._make_args, "normalize_obs": False, "normalize_reward": False}
        return make_single(**{**args, "clip_obs": None, "clip_reward": None}, snapshot=False)


def space_facts(observation_space: Any, action_space: Any, id: str = "env") -> dict[str, Any]:
    """The facts a model needs: ``obs_dim`` and ``num_actions`` (discrete) or ``action_dim``,
    ``action_low`` and ``action_high`` (continuous)."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"env.id: {id} observes {observation_space}; the actor-critic models take flat Box observations."
        )
    facts: dict[str, Any] = {"obs_dim": int(math.prod(observation_space.shape))}
    if isinstance(action_space, spaces.Discrete):
        facts["num_actions"] = int(action_space.n)
    elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        facts["action_dim"] = int(action_space.shape[0])
        facts["action_low"] = [float(x) for x in action_space.low]
        facts["action_high"] = [float(x) for x in action_space.high]
    else:
        raise ConfigError(
            f"env.id: {id} acts in {action_space}; supported are Discrete and one-dimensional Box actions."
        )
    return facts
