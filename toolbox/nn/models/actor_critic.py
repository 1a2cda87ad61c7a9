"""``actor_critic``: separate actor and critic MLPs with orthogonal initialisation (CleanRL's ``Agent``).

The environment's facts are injected by the builder: ``obs_dim``, and ``num_actions`` (discrete:
a categorical head) or ``action_dim``/``action_low``/``action_high`` (continuous: a diagonal
Gaussian head)::

    model = MODELS.build({"name": "actor_critic"}, obs_dim=4, num_actions=2)
    action, logprob, entropy, value = model.get_action_and_value(obs)   # sampling, for rollouts
    _, logprob, entropy, value = model.get_action_and_value(obs, action) # scoring, for updates
    model.act(raw_obs)                                                   # deterministic, for eval

Both networks are ``mlp/dense`` stacks; every Linear is initialised orthogonally with gain √2 and
zero bias, except the actor's output layer (gain 0.01: a near-uniform initial policy) and the
critic's (gain 1), as in CleanRL's ``layer_init``.

Observation normalisation happens in the environment during training (``toolbox.rl.envs``). So
that the saved policy acts on raw observations too, the model carries the statistics as buffers
(``obs_mean``, ``obs_var``, ``obs_clip``), which the trainer copies from the environments;
:meth:`ActorCritic.act` applies them, :meth:`ActorCritic.get_action_and_value` does not.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat
from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn.layer_spec import build_layer, config_path
from toolbox.nn.layers.mlp import MLP


def orthogonal_init(mlp: MLP, output_gain: float) -> None:
    """CleanRL's ``layer_init``: orthogonal weights (gain √2, the last layer ``output_gain``), zero biases."""
    linears = [m for m in mlp.net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, output_gain if i == len(linears) - 1 else math.sqrt(2))
        if layer.bias is not None:
            nn.init.constant_(layer.bias, 0.0)


class ActorCritic(nn.Module):
    """A policy (actor MLP + policy head) and a state-value function (critic MLP).

    Args:
        obs_dim: size of the (flattened) observation; injected from the environment.
        num_actions: number of discrete actions; injected (discrete environments).
        action_dim: number of action dimensions; injected (continuous environments).
        action_low: lower action bounds; injected (continuous environments).
        action_high: upper action bounds; injected (continuous environments).
        hidden_dims: hidden layer sizes of both networks.
        activation: layer spec of the hidden activation (CleanRL: tanh).
        head: layer spec of the policy head (None: ``policy_head/categorical`` for discrete actions,
            ``policy_head/diag_gaussian`` for continuous ones).
        actor_gain: orthogonal gain of the actor's output layer.
        critic_gain: orthogonal gain of the critic's output layer.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int | None = None,
        action_dim: int | None = None,
        action_low: list[float] | None = None,
        action_high: list[float] | None = None,
        hidden_dims: list[int] = [64, 64],  # noqa: B006 - a config default, never mutated
        activation: dict[str, Any] | str = "activation/tanh",
        head: dict[str, Any] | str | None = None,
        actor_gain: float = 0.01,
        critic_gain: float = 1.0,
    ) -> None:
        super().__init__()
        if (num_actions is None) == (action_dim is None):
            raise ConfigError(
                "model: actor_critic needs exactly one of num_actions (discrete) and action_dim "
                "(continuous); both come from the environment (env: {name: gym, id: ...})."
            )
        self.config = {
            "obs_dim": obs_dim,
            "num_actions": num_actions,
            "action_dim": action_dim,
            "action_low": action_low,
            "action_high": action_high,
            "hidden_dims": list(hidden_dims),
            "activation": activation,
            "head": head,
            "actor_gain": actor_gain,
            "critic_gain": critic_gain,
        }
        discrete = num_actions is not None
        head = head or ("policy_head/categorical" if discrete else "policy_head/diag_gaussian")
        dims = (
            {"num_actions": num_actions}
            if discrete
            else {"action_dim": action_dim, "action_low": action_low, "action_high": action_high}
        )
        self.head = build_layer(head, path="head", role="policy_head", **dims)
        act = {"name": activation} if isinstance(activation, str) else activation
        with config_path("model"):
            self.actor = MLP(obs_dim, self.head.out_dim, hidden_dims=hidden_dims, activation=act)
            self.critic = MLP(obs_dim, 1, hidden_dims=hidden_dims, activation=act)
        orthogonal_init(self.critic, critic_gain)
        orthogonal_init(self.actor, actor_gain)
        self.discrete = discrete
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_var", torch.ones(obs_dim))
        self.register_buffer("obs_clip", torch.tensor(float("inf")))
        self.register_buffer("obs_normalized", torch.tensor(False))

    # training -------------------------------------------------------------------------------------
    def get_value(self, obs: Tensor) -> Tensor:
        """``V(obs)``, shape ``[B]``."""
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(
        self, obs: Tensor, action: Tensor | None = None, entropy: bool = True
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
        """(action, log π(action|obs), entropy, V(obs)); samples the action when none is given.
        ``entropy=False`` skips the entropy (None), which a rollout does not need."""
        dist = self.head(self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy() if entropy else None, self.get_value(obs)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """(the actor's output: logits or the Gaussian mean, V(obs))."""
        return self.actor(obs), self.get_value(obs)

    # acting ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def set_observation_statistics(self, mean: Any, var: Any, clip: float | None = None) -> None:
        """Store the observation normalisation the environments applied during training."""
        self.obs_mean.copy_(torch.as_tensor(mean, dtype=self.obs_mean.dtype))
        self.obs_var.copy_(torch.as_tensor(var, dtype=self.obs_var.dtype))
        self.obs_clip.fill_(float("inf") if clip is None else float(clip))
        self.obs_normalized.fill_(True)

    def normalize(self, obs: Tensor) -> Tensor:
        """Raw observations as the policy saw them in training (gymnasium's NormalizeObservation)."""
        if not bool(self.obs_normalized):
            return obs
        out = (obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)
        return out.clamp(-self.obs_clip, self.obs_clip)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """The action for raw observations: the distribution's mode, or a sample."""
        out = self.actor(self.normalize(obs))
        return self.head.mode(out) if deterministic else self.head(out).sample()

    # saving ---------------------------------------------------------------------------------------
    def save_pretrained(self, path: Any, state_dict: dict[str, Any] | None = None) -> None:
        """``config.json`` (the constructor's arguments) and ``model.safetensors``."""
        import json
        from pathlib import Path

        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(
            json.dumps({"model_type": "actor_critic", **self.config}, indent=2) + "\n"
        )
        state = state_dict if state_dict is not None else self.state_dict()
        save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, path: Any) -> ActorCritic:
        import json
        from pathlib import Path

        from safetensors.torch import load_file

        config = json.loads((Path(path) / "config.json").read_text())
        config.pop("model_type", None)
        model = cls(**config)
        model.load_state_dict(load_file(str(Path(path) / "model.safetensors")))
        return model


@MODELS.register("actor_critic")
def actor_critic(
    obs_dim: AtLeastOne,
    num_actions: AtLeastOne | None = None,
    action_dim: AtLeastOne | None = None,
    action_low: list[float] | None = None,
    action_high: list[float] | None = None,
    hidden_dims: list[AtLeastOne] = [64, 64],  # noqa: B006 - a config default, never mutated
    activation: dict[str, Any] | str = "activation/tanh",
    head: dict[str, Any] | str | None = None,
    actor_gain: NonNegativeFloat = 0.01,
    critic_gain: NonNegativeFloat = 1.0,
    path: str | None = None,
) -> ActorCritic:
    """An actor-critic for gymnasium environments (CleanRL's ``Agent``): see :class:`ActorCritic`.

    Args:
        obs_dim: size of the (flattened) observation; injected from the environment.
        num_actions: number of discrete actions; injected (discrete environments).
        action_dim: number of action dimensions; injected (continuous environments).
        action_low: lower action bounds; injected (continuous environments).
        action_high: upper action bounds; injected (continuous environments).
        hidden_dims: hidden layer sizes of both networks.
        activation: layer spec of the hidden activation (CleanRL: tanh).
        head: layer spec of the policy head (None: categorical or diagonal Gaussian by the env).
        actor_gain: orthogonal gain of the actor's output layer.
        critic_gain: orthogonal gain of the critic's output layer.
        path: a folder written by ``save_pretrained`` to load instead (its config wins).
    """
    if path is not None:
        return ActorCritic.from_pretrained(path)
    with config_path("model"):
        return ActorCritic(
            obs_dim,
            num_actions=num_actions,
            action_dim=action_dim,
            action_low=action_low,
            action_high=action_high,
            hidden_dims=hidden_dims,
            activation=activation,
            head=head,
            actor_gain=actor_gain,
            critic_gain=critic_gain,
        )
