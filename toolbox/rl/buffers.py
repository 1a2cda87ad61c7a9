"""Buffers: fixed-size on-policy storage for environment rollouts, and a FIFO of text rollouts.

``RolloutBuffer`` is CleanRL's ``ppo.py`` storage: time-major ``[num_steps, num_envs, ...]``
tensors filled step by step, then GAE over them, then flattened shuffled minibatches::

    buf = RolloutBuffer(num_steps=128, num_envs=4, obs_shape=(4,))
    for t in range(128):
        buf.add(t, obs=obs, action=a, logprob=lp, reward=r, done=d, value=v)
        buf.add(t, truncated=tr, final_value=fv)   # optional: time-limit ends and V(final obs)
    buf.compute_advantages(GAE(0.99, 0.95), next_value, next_done, bootstrap_truncated=True)
    for mb in buf.minibatches(64, generator): ...   # dict of flat [64, ...] tensors
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

KEYS = ("obs", "action", "logprob", "reward", "done", "value", "truncated", "final_value")


class RolloutBuffer:
    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...] = (),
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.long,
        device: torch.device | str = "cpu",
    ) -> None:
        self.num_steps, self.num_envs = num_steps, num_envs
        shape = (num_steps, num_envs)
        self.data: dict[str, Tensor] = {
            "obs": torch.zeros(shape + tuple(obs_shape), device=device),
            "action": torch.zeros(shape + tuple(action_shape), dtype=action_dtype, device=device),
            "logprob": torch.zeros(shape, device=device),
            "reward": torch.zeros(shape, device=device),
            "done": torch.zeros(shape, device=device),
            "value": torch.zeros(shape, device=device),
            # step t ended its episode by a time limit, and the value of that episode's last obs
            "truncated": torch.zeros(shape, device=device),
            "final_value": torch.zeros(shape, device=device),
        }
        self.advantages: Tensor | None = None
        self.returns: Tensor | None = None

    def add(self, step: int, **values: Any) -> None:
        """Store one step for every env: obs, action, logprob, reward, done, value."""
        unknown = set(values) - set(KEYS)
        if unknown:
            raise KeyError(f"unknown buffer keys {sorted(unknown)}; valid: {', '.join(KEYS)}")
        for k, v in values.items():
            self.data[k][step] = torch.as_tensor(v, dtype=self.data[k].dtype, device=self.data[k].device)

    def compute_advantages(
        self, estimator: Any, next_value: Tensor, next_done: Tensor, bootstrap_truncated: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Fill ``advantages`` and ``returns`` with a GAE-shaped estimator (``ADVANTAGES['gae']``);
        ``bootstrap_truncated`` passes the stored ``truncated``/``final_value`` on to it."""
        extra = (
            {"truncated": self.data["truncated"], "final_values": self.data["final_value"]}
            if bootstrap_truncated
            else {}
        )
        self.advantages, self.returns = estimator(
            self.data["reward"], self.data["value"], self.data["done"], next_value, next_done, **extra
        )
        return self.advantages, self.returns

    def flat(self) -> dict[str, Tensor]:
        n = self.num_steps * self.num_envs
        out = {k: v.reshape(n, *v.shape[2:]) for k, v in self.data.items()}
        if self.advantages is not None:
            out["advantage"] = self.advantages.reshape(n)
            out["return"] = self.returns.reshape(n)
        return out

    def minibatches(
        self, size: int, generator: torch.Generator | None = None, keys: tuple[str, ...] | None = None
    ) -> Iterator[dict[str, Tensor]]:
        """Shuffled (with ``generator``) or in-order minibatches of ``keys`` (None: every key)."""
        data = self.flat()
        if keys is not None:
            data = {k: data[k] for k in keys}
        n = self.num_steps * self.num_envs
        order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
        for start in range(0, n, size):
            idx = order[start : start + size].to(self.data["reward"].device)
            yield {k: v[idx] for k, v in data.items()}


class RolloutQueue:
    """A bounded FIFO of rollouts (text or env), oldest dropped first: for reusing a rollout over
    several steps, or for asynchronous generation that runs ahead of the updates."""

    def __init__(self, capacity: int = 1) -> None:
        if capacity < 1:
            raise ValueError("RolloutQueue capacity must be at least 1")
        self._items: deque[Any] = deque(maxlen=capacity)

    def put(self, rollout: Any) -> None:
        self._items.append(rollout)

    def get(self) -> Any:
        if not self._items:
            raise IndexError("RolloutQueue is empty")
        return self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)
