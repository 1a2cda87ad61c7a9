"""The ppo_env trainer: PPO on gymnasium environments (CleanRL's ``ppo.py``, as a trainer).

One trainer step is one PPO iteration::

    rollout     num_steps × num_envs environment steps with the current policy (no grad)
    GAE         advantages and returns (truncated episodes bootstrapped from V(final obs))
    update      update_epochs passes over the rollout in num_minibatches shuffled minibatches,
                one optimizer step each (BaseTrainer.backward / optimizer_step), stopping the
                passes early once approx_kl > target_kl

Files one step crosses, in order: ``rl/envs.py`` (the vectorised environments) → the model's
``act`` (``nn/models/actor_critic.py``) → ``rl/buffers.py`` (the rollout) → ``rl/advantages.py`` (GAE)
→ ``objectives/actor_critic.py`` (the clipped PPO loss) → ``trainer/base.py`` (``backward``,
``optimizer_step``) → ``trainer/callbacks/``.

so ``trainer.max_steps`` counts iterations and the environment steps are
``max_steps × num_steps × env.num_envs``. The scheduler steps once per iteration (BaseTrainer), so
``scheduler: {name: linear, warmup_steps: 0, min_lr_ratio: 0.0}`` is CleanRL's ``anneal_lr``.

Time limits: ``bootstrap_truncated=true`` (the default) keeps truncation apart from termination:
at a truncated step the GAE target is ``r + γ·V(final obs)``; ``false`` treats it as a
termination, as CleanRL does (``next_done = terminations | truncations``).

Metrics per iteration: episode_return / episode_length (mean over the episodes that ended in it),
return_mean (over the last ``return_window`` episodes), pg_loss, v_loss, entropy, approx_kl,
old_approx_kl (the last minibatch's, as CleanRL logs them), clipfrac (mean over minibatches),
explained_variance, loss / grad_norm (mean over minibatches), lr, global_step, sps and
``update_epochs_done``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt, PositiveFloat
from toolbox.core.errors import ConfigError
from toolbox.core.registries import ADVANTAGES, TRAINERS
from toolbox.objectives.base import ActorCriticObjective
from toolbox.rl.buffers import RolloutBuffer
from toolbox.rl.env_state import load_vector_env_state, observation_statistics, vector_env_state
from toolbox.trainer.base import BaseTrainer

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


UPDATE_KEYS = ("obs", "action", "logprob", "value", "advantage", "return")  # what the loss reads


@TRAINERS.register("ppo_env")
class PPOEnvTrainer(BaseTrainer):
    """PPO with an actor-critic on vectorised gymnasium environments (``env:``).

    Args:
        max_steps: PPO iterations (rollout + update); env steps = max_steps × num_steps × num_envs.
        num_steps: environment steps per copy per rollout (CleanRL: 128 discrete, 2048 continuous).
        num_minibatches: minibatches per update epoch (the rollout's num_steps × num_envs
            transitions must split evenly).
        update_epochs: passes over the rollout per iteration.
        advantage: the advantage estimator spec (``gae`` with ``gamma`` and ``lam``).
        bootstrap_truncated: bootstrap time-limit truncations from the value of the final
            observation (False: treat them as terminations, as CleanRL does).
        target_kl: stop the iteration's update epochs once the last minibatch's approx_kl exceeds
            this (None: never; CleanRL checks after each epoch).
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        return_window: episodes averaged by the ``return_mean`` metric.
        eval_every: run the evaluators every this many iterations (0: only at the end).
        save_every: save a checkpoint every this many iterations (0: only at the end).
    """

    objective_family = ActorCriticObjective

    def __init__(
        self,
        parts: Components,
        max_steps: AtLeastOne = 100,
        num_steps: AtLeastOne = 128,
        num_minibatches: AtLeastOne = 4,
        update_epochs: AtLeastOne = 4,
        advantage: dict[str, Any] | None = None,
        bootstrap_truncated: bool = True,
        target_kl: PositiveFloat | None = None,
        max_grad_norm: NonNegativeFloat = 0.5,
        return_window: AtLeastOne = 20,
        eval_every: NonNegativeInt = 0,
        save_every: NonNegativeInt = 0,
    ) -> None:
        super().__init__(
            parts,
            max_steps=max_steps,
            eval_every=eval_every,
            save_every=save_every,
            max_grad_norm=max_grad_norm,
        )
        if parts.env is None:
            raise ConfigError(
                "trainer 'ppo_env' needs an environment: set env=gym env.id=CartPole-v1 "
                "(or use an experiment such as experiment=ppo_cartpole)."
            )
        spec = parts.env
        self.num_envs = spec.num_envs
        self.num_steps = num_steps
        batch = num_steps * self.num_envs
        if num_minibatches < 1 or batch % num_minibatches:
            raise ConfigError(
                f"trainer.num_minibatches: {num_minibatches} does not divide the rollout of "
                f"num_steps × env.num_envs = {num_steps} × {self.num_envs} = {batch} transitions."
            )
        self.minibatch_size = batch // num_minibatches
        self.update_epochs = update_epochs
        self.advantage = ADVANTAGES.build(
            advantage or {"name": "gae", "gamma": 0.99, "lam": 0.95}, "trainer.advantage"
        )
        self.bootstrap_truncated = bootstrap_truncated
        self.target_kl = target_kl
        self.clip_obs = spec.clip_obs if spec.normalize_obs else None
        self.normalize_obs = spec.normalize_obs
        self.device = self.strategy.device

        facts = spec.facts
        discrete = "num_actions" in facts
        self.buffer = RolloutBuffer(
            num_steps,
            self.num_envs,
            obs_shape=(facts["obs_dim"],),
            action_shape=() if discrete else (facts["action_dim"],),
            action_dtype=torch.long if discrete else torch.float32,
            device=self.device,
        )
        self.envs = spec.make()
        obs, _ = self.envs.reset(seed=self.context.seed)  # copy i gets seed + i, as CleanRL
        self.next_obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        self.next_done = torch.zeros(self.num_envs, device=self.device)
        self.generator = torch.Generator().manual_seed(self.context.seed)  # minibatch order
        self.returns: deque[float] = deque(maxlen=return_window)
        self.lengths: deque[float] = deque(maxlen=return_window)
        self.global_step = 0
        self.episodes = 0

    # one iteration ------------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        ended = self._rollout()
        rollout_time = time.perf_counter() - start
        with torch.no_grad():
            next_value = self.model.get_value(self.next_obs)
        buf = self.buffer
        advantages, returns = buf.compute_advantages(
            self.advantage, next_value, self.next_done, bootstrap_truncated=self.bootstrap_truncated
        )
        metrics = self._update()
        values = buf.data["value"].flatten()
        var_y = returns.flatten().var()
        if var_y > 0:
            metrics["explained_variance"] = float(1 - (returns.flatten() - values).var() / var_y)
        if ended:
            metrics["episode_return"] = float(np.mean([r for r, _ in ended]))
            metrics["episode_length"] = float(np.mean([n for _, n in ended]))
        if self.returns:
            metrics["return_mean"] = float(np.mean(self.returns))
            metrics["length_mean"] = float(np.mean(self.lengths))
        metrics["episodes"] = float(self.episodes)
        metrics["global_step"] = float(self.global_step)
        elapsed = time.perf_counter() - start
        metrics["sps"] = self.num_steps * self.num_envs / elapsed
        metrics["rollout_time"] = rollout_time
        metrics["step_time"] = elapsed
        self._sync_observation_statistics()
        return metrics

    def _rollout(self) -> list[tuple[float, float]]:
        """Fill the buffer with num_steps steps of every copy; the (return, length) of ended episodes."""
        buf, model, device = self.buffer, self.model, self.device
        truncated = buf.data["truncated"]
        final_value = buf.data["final_value"]
        truncated.zero_()
        final_value.zero_()
        ended: list[tuple[float, float]] = []
        for t in range(self.num_steps):
            obs = self.next_obs
            with torch.no_grad():
                action, logprob, _, value = model.get_action_and_value(obs, entropy=False)
            buf.add(t, obs=obs, done=self.next_done, action=action, logprob=logprob, value=value)
            next_obs, reward, terminated, trunc, infos = self.envs.step(action.cpu().numpy())
            buf.data["reward"][t] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            done = np.logical_or(terminated, trunc)
            if done.any():
                cut = np.logical_and(trunc, np.logical_not(terminated))
                if self.bootstrap_truncated and cut.any():
                    final = torch.as_tensor(np.stack(infos["final_obs"][cut]), dtype=torch.float32)
                    idx = torch.as_tensor(np.flatnonzero(cut), device=device)
                    with torch.no_grad():
                        final_value[t, idx] = model.get_value(final.to(device))
                    truncated[t, idx] = 1.0
                ended.extend(self._episodes(infos))
            self.next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
            self.next_done = torch.as_tensor(done, dtype=torch.float32, device=device)
        self.global_step += self.num_steps * self.num_envs
        return ended

    def _episodes(self, infos: dict[str, Any]) -> list[tuple[float, float]]:
        final = infos.get("final_info", {})
        if "episode" not in final:
            return []
        mask = final["_episode"]
        out = []
        for r, n in zip(final["episode"]["r"][mask], final["episode"]["l"][mask], strict=True):
            out.append((float(r), float(n)))
            self.returns.append(float(r))
            self.lengths.append(float(n))
        self.episodes += len(out)
        return out

    def _update(self) -> dict[str, float]:
        """update_epochs × num_minibatches optimizer steps over the rollout."""
        if not self.model.training:
            self.model.train()
        clipfracs, losses, norms = [], [], []
        last: dict[str, float] = {}
        epochs = 0
        for _ in range(self.update_epochs):
            epochs += 1
            for batch in self.buffer.minibatches(self.minibatch_size, self.generator, UPDATE_KEYS):
                with self.precision.autocast():
                    out = self.objective(self.model, batch)
                self.backward(out.loss_sum)
                step = self.optimizer_step(float(out.loss_sum.detach()), out.num_items)
                clipfracs.append(out.metrics["clipfrac"])
                losses.append(step["loss"])
                norms.append(step["grad_norm"])
                last = {**out.metrics, "lr": step["lr"]}
            if self.target_kl is not None and last["approx_kl"] > self.target_kl:
                break
        return {
            **last,
            "clipfrac": float(np.mean(clipfracs)),
            "loss": float(np.mean(losses)),
            "grad_norm": float(np.mean(norms)),
            "update_epochs_done": float(epochs),
        }

    def _sync_observation_statistics(self) -> None:
        """Give the model the environments' observation normalisation, so the saved policy acts
        on raw observations (the evaluator and ``toolbox eval`` use it)."""
        if not self.normalize_obs:
            return
        stats = observation_statistics(self.envs)
        if stats is not None:
            self.strategy.unwrap(self.model).set_observation_statistics(*stats, clip=self.clip_obs)

    # lifecycle ----------------------------------------------------------------------------------
    def teardown(self) -> None:
        self.envs.close()

    def extra_state(self) -> dict[str, Any]:
        return {
            "envs": vector_env_state(self.envs),
            "next_obs": self.next_obs.cpu().clone(),
            "next_done": self.next_done.cpu().clone(),
            "generator": self.generator.get_state(),
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "global_step": self.global_step,
            "episodes": self.episodes,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        load_vector_env_state(self.envs, state["envs"])
        self.next_obs = state["next_obs"].to(self.device)
        self.next_done = state["next_done"].to(self.device)
        self.generator.set_state(state["generator"])
        self.returns.extend(state["returns"])
        self.lengths.extend(state["lengths"])
        self.global_step = state["global_step"]
        self.episodes = state["episodes"]
