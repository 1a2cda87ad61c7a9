"""The whole state of vectorised environments as bytes: what a bitwise resume needs.

A checkpoint of a PPO run taken mid-episode must bring back every sub-environment exactly: the
simulator's state, the episode's step count (TimeLimit), the episode statistics so far, the
normalisation statistics and the environment's RNG. :class:`Snapshot`, the outermost wrapper of
every sub-environment (``toolbox.rl.envs``), gives all of it as one ``snapshot`` attribute that
gymnasium's ``get_attr``/``set_attr`` reach in this process (sync) or in the worker (async)::

    state = vector_env_state(envs)          # list of bytes, one per sub-environment
    load_vector_env_state(envs, state)

The wrapper chain pickles attribute by attribute (cloudpickle: some wrappers hold lambdas). Environments that pickle as their constructor
arguments (gymnasium's ``EzPickle``: the MuJoCo envs) lose their simulator state and RNG that way,
so both are saved beside the pickle: the RNG's bit-generator state for every env, and MuJoCo's
full integration state (``mj_getState(mjSTATE_INTEGRATION)``: positions, velocities, activations,
warm-start accelerations, time) where the env has ``model`` and ``data``.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from toolbox.core.errors import CheckpointError


def _mujoco_state(base: Any) -> np.ndarray | None:
    if not (hasattr(base, "model") and hasattr(base, "data")):
        return None
    try:
        import mujoco
    except ImportError:
        return None
    if not isinstance(base.data, mujoco.MjData):
        return None
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(base.model, spec), dtype=np.float64)
    mujoco.mj_getState(base.model, base.data, state, spec)
    return state


class Snapshot(gym.Wrapper):
    """Outermost wrapper of a sub-environment; ``env.snapshot`` is its whole state as bytes, and
    assigning ``env.snapshot = data`` restores it."""

    @property
    def snapshot(self) -> bytes:
        base = self.env.unwrapped
        try:
            return cloudpickle.dumps(
                {
                    "env": self.env,
                    "np_random": base.np_random.bit_generator.state,
                    "mujoco": _mujoco_state(base),
                }
            )
        except Exception as e:  # an env holding a handle that does not pickle
            raise CheckpointError(
                f"environment {base.spec.id if base.spec else type(base).__name__} cannot be "
                f"checkpointed: its state does not pickle ({type(e).__name__}: {e}); save no "
                "checkpoints mid-run (trainer.save_every=0) or use another environment."
            ) from None

    @snapshot.setter
    def snapshot(self, data: bytes) -> None:
        state = pickle.loads(data)
        self.env = state["env"]
        base = self.env.unwrapped
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["np_random"]
        base.np_random = rng
        if state["mujoco"] is not None:
            import mujoco

            mujoco.mj_setState(base.model, base.data, state["mujoco"], mujoco.mjtState.mjSTATE_INTEGRATION)


def vector_env_state(envs: Any) -> list[bytes]:
    """Every sub-environment's snapshot (``envs`` built by ``GymEnv.make``)."""
    return list(envs.get_attr("snapshot"))


def load_vector_env_state(envs: Any, state: list[bytes]) -> None:
    if len(state) != envs.num_envs:
        raise CheckpointError(
            f"the checkpoint holds {len(state)} environments but env.num_envs={envs.num_envs}; "
            "resume with the num_envs the run was started with."
        )
    envs.set_attr("snapshot", list(state))


def observation_statistics(envs: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The sub-environments' observation-normalisation statistics merged into one (mean, var), as
    if one running estimate had seen every copy's observations; None when nothing normalises."""
    try:
        stats = envs.get_attr("obs_rms")
    except AttributeError:
        return None
    mean, var, count = stats[0].mean, stats[0].var, stats[0].count
    for rms in stats[1:]:  # the parallel-variance merge of RunningMeanStd.update_from_moments
        delta = rms.mean - mean
        total = count + rms.count
        m2 = var * count + rms.var * rms.count + delta**2 * count * rms.count / total
        mean, var, count = mean + delta * rms.count / total, m2 / total, total
    return np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
