"""``episodes``: the mean return of deterministic episodes of the policy in its environment.

The evaluator builds one environment from the run's ``env:`` node with the same wrappers as
training but no normalisation (``GymEnv.make_eval``); the policy normalises the raw observations
itself with the statistics the trainer stored in it, and acts with its distribution's mode (argmax
or the Gaussian mean). Episode ``i`` is reset with ``seed + i``, so every evaluation of the same
policy plays the same episodes. Returns are the environment's raw (un-normalised) rewards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@EVALUATORS.register("episodes")
class Episodes:
    """Deterministic episodes: ``eval/return_mean``, ``eval/return_std``, ``eval/return_min``,
    ``eval/return_max`` and ``eval/length_mean``.

    Args:
        num_episodes: episodes to play.
        seed: the first episode's reset seed (episode i uses seed + i).
        deterministic: act with the mode of the policy (False: sample from it).
    """

    def __init__(self, num_episodes: int = 10, seed: int = 10_000, deterministic: bool = True) -> None:
        if num_episodes < 1:
            raise ConfigError(f"eval.episodes.num_episodes: must be at least 1, got {num_episodes}.")
        self.num_episodes = num_episodes
        self.seed = seed
        self.deterministic = deterministic

    def __call__(self, parts: Components) -> dict[str, float]:
        if parts.env is None:
            raise ConfigError(
                "eval.episodes: the run has no environment (env:); remove the evaluator or set env=gym."
            )
        model = parts.strategy.unwrap(parts.model)
        device = parts.strategy.device
        env = parts.env.make_eval()
        returns, lengths = [], []
        try:
            for i in range(self.num_episodes):
                obs, _ = env.reset(seed=self.seed + i)
                total, steps, done = 0.0, 0, False
                while not done:
                    x = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=device).unsqueeze(0)
                    action = model.act(x, deterministic=self.deterministic)[0].cpu().numpy()
                    obs, reward, terminated, truncated, _ = env.step(action)
                    total += float(reward)
                    steps += 1
                    done = terminated or truncated
                returns.append(total)
                lengths.append(steps)
        finally:
            env.close()
        r = np.asarray(returns)
        return {
            "eval/return_mean": float(r.mean()),
            "eval/return_std": float(r.std()),
            "eval/return_min": float(r.min()),
            "eval/return_max": float(r.max()),
            "eval/length_mean": float(np.mean(lengths)),
        }
