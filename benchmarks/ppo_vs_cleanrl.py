"""Our ppo_env trainer vs a CleanRL-style single-file PPO loop: the same hyper-parameters, one run.

    nice -n 5 .venv/bin/python benchmarks/ppo_vs_cleanrl.py --env CartPole-v1 --total-timesteps 500000 \\
        --seed 0 --out benchmarks/results/ppo_vs_cleanrl.json

The CleanRL side below is ``cleanrl/ppo.py`` (discrete actions) written out as one function: its
``Agent`` (orthogonal init), its rollout, its GAE, its minibatch loop, its logging of episodic
returns, only ported to gymnasium 1.x (SAME_STEP autoreset, which is the autoreset CleanRL's
gymnasium 0.29 had). Ours is ``toolbox train experiment=ppo_cartpole`` with the same settings
(``bootstrap_truncated=false`` so both compute the same targets) and the default callbacks
(metrics.jsonl, console, throughput, memory, the final checkpoint and model export), without the
final evaluation episodes, which CleanRL does not play.

Reported per side: env steps per second over the whole training (CleanRL's SPS: global steps /
wall time from the first reset to the last update; ours: from ``fit()``'s start, after the
environments and the model are built as CleanRL's are before its clock starts, to its end, the
final checkpoint and model export included), the mean episodic return of the last 20 training
episodes, and the ratio ours / CleanRL of the SPS (the goal is >= 1.0: the framework costs
nothing). Both run in this process with ``torch.set_num_threads(--threads)``, CleanRL first. The
two draw different random streams (CleanRL shuffles minibatches with NumPy, we with a seeded torch
generator), so their returns are two samples of the same algorithm, not the same curve.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections import deque
from pathlib import Path


# -- the CleanRL side ----------------------------------------------------------------------------
def cleanrl_ppo(args) -> dict:
    """cleanrl/ppo.py's training loop, hyper-parameters from ``args``."""
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from gymnasium.vector import AutoresetMode
    from torch.distributions.categorical import Categorical

    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self, envs):
            super().__init__()
            obs = np.array(envs.single_observation_space.shape).prod()
            self.critic = nn.Sequential(
                layer_init(nn.Linear(obs, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 1), std=1.0),
            )
            self.actor = nn.Sequential(
                layer_init(nn.Linear(obs, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
            )

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action=None):
            logits = self.actor(x)
            probs = Categorical(logits=logits)
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(x)

    def make_env(env_id):
        def thunk():
            env = gym.make(env_id)
            env = gym.wrappers.RecordEpisodeStatistics(env)
            return env

        return thunk

    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cpu")

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env) for _ in range(args.num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    episodic: deque[float] = deque(maxlen=20)
    curve = []

    for iteration in range(1, num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.lr
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)
            if "final_info" in infos and "episode" in infos["final_info"]:
                final = infos["final_info"]
                for r in final["episode"]["r"][final["_episode"]]:
                    episodic.append(float(r))
                    curve.append((global_step, float(r)))

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = (
                    delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                )
            returns = advantages + values

        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(batch_size)
        clipfracs = []
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb_inds], b_actions.long()[mb_inds]
                )
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]
                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(
                    newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                )
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        _explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        _ = (old_approx_kl.item(), approx_kl.item(), v_loss.item(), pg_loss.item())  # CleanRL logs them
    seconds = time.time() - start_time
    envs.close()
    return {
        "sps": global_step / seconds,
        "seconds": seconds,
        "global_step": global_step,
        "return_mean_last20": float(np.mean(episodic)),
        "curve": curve,
    }


# -- our side ------------------------------------------------------------------------------------
def ours(args, run_dir: str) -> dict:
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder, load_config

    batch = args.num_envs * args.num_steps
    overrides = [
        "experiment=ppo_cartpole",
        f"env.id={args.env}",
        f"env.num_envs={args.num_envs}",
        f"seed={args.seed}",
        f"num_threads={args.threads}",
        "device=cpu",
        f"trainer.max_steps={args.total_timesteps // batch}",
        f"trainer.num_steps={args.num_steps}",
        f"trainer.num_minibatches={args.num_minibatches}",
        f"trainer.update_epochs={args.update_epochs}",
        f"trainer.advantage.gamma={args.gamma}",
        f"trainer.advantage.lam={args.gae_lambda}",
        "trainer.bootstrap_truncated=false",
        f"trainer.max_grad_norm={args.max_grad_norm}",
        "trainer.save_every=0",
        f"optimizer.lr={args.lr}",
        f"objective.clip_coef={args.clip_coef}",
        f"objective.ent_coef={args.ent_coef}",
        f"objective.vf_coef={args.vf_coef}",
        "eval.episodes=null",
        f"run_dir={run_dir}",
    ]
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    last: dict = {}
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: last.update(d.metrics))
    start = time.time()  # as CleanRL's clock: environments and model built, not yet trained
    parts.trainer.fit()
    seconds = time.time() - start
    steps = parts.trainer.global_step
    return {
        "sps": steps / seconds,
        "seconds": seconds,
        "global_step": steps,
        "return_mean_last20": last.get("return_mean"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    theirs = cleanrl_ppo(args)
    theirs.pop("curve")
    with tempfile.TemporaryDirectory() as tmp:
        mine = ours(args, os.path.join(tmp, "run"))
    result = {
        "benchmark": "ppo_vs_cleanrl",
        "env": args.env,
        "seed": args.seed,
        "total_timesteps": args.total_timesteps,
        "threads": args.threads,
        "hyperparameters": {
            k: getattr(args, k)
            for k in (
                "num_envs",
                "num_steps",
                "num_minibatches",
                "update_epochs",
                "lr",
                "gamma",
                "gae_lambda",
                "clip_coef",
                "ent_coef",
                "vf_coef",
                "max_grad_norm",
            )
        },
        "ours": mine,
        "cleanrl": theirs,
        "sps_ratio": mine["sps"] / theirs["sps"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
