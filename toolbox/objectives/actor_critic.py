"""The PPO loss of an actor-critic on environment transitions (CleanRL's ``ppo.py`` update).

On a minibatch of a rollout (flat ``[B, ...]`` tensors: ``obs``, ``action``, ``logprob`` and
``value`` as sampled, ``advantage`` and ``return`` from GAE), with ratio ρ = π_θ(a|s) / π_old(a|s)::

    pg_t = max(−A·ρ, −A·clip(ρ, 1−ε, 1+ε))                       (A normalised over the minibatch)
    v_t  = ½ (V(s) − R)²,  or with clip_vloss  ½ max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)
    loss = mean_t(pg_t − ent_coef · H_t + vf_coef · v_t)

returned as ``loss_sum`` over the minibatch and ``num_items = B``, so ``loss_sum / num_items`` is
CleanRL's ``loss``. Diagnostics (``metrics``): pg_loss, v_loss, entropy, approx_kl (the
``(ρ−1) − log ρ`` estimator), old_approx_kl (``−log ρ``) and clipfrac.
"""

from __future__ import annotations

from typing import Any

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import ActorCriticObjective, LossOutput


@OBJECTIVES.register("ppo_actor_critic")
class PPOActorCritic(ActorCriticObjective):
    """PPO's clipped surrogate, the (optionally clipped) value loss and an entropy bonus.

    Args:
        clip_coef: the surrogate clipping ε (CleanRL: 0.2).
        clip_vloss: clip the value update around the rollout's values with the same ε.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        norm_adv: normalise the advantages over each minibatch (mean 0, std 1).
    """

    def __init__(
        self,
        clip_coef: float = 0.2,
        clip_vloss: bool = True,
        vf_coef: float = 0.5,
        ent_coef: float = 0.01,
        norm_adv: bool = True,
    ) -> None:
        if clip_coef <= 0:
            raise ConfigError(f"objective.clip_coef: must be positive, got {clip_coef}.")
        self.clip_coef = clip_coef
        self.clip_vloss = clip_vloss
        self.vf_coef = vf_coef
        self.ent_coef = ent_coef
        self.norm_adv = norm_adv

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        _, logprob, entropy, value = model.get_action_and_value(batch["obs"], batch["action"])
        logratio = logprob - batch["logprob"]
        ratio = logratio.exp()
        adv = batch["advantage"]
        if self.norm_adv and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        eps = self.clip_coef
        pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps))
        returns = batch["return"]
        if self.clip_vloss:
            old = batch["value"]
            clipped = old + torch.clamp(value - old, -eps, eps)
            v = 0.5 * torch.max((value - returns) ** 2, (clipped - returns) ** 2)
        else:
            v = 0.5 * (value - returns) ** 2
        per_item = pg - self.ent_coef * entropy + self.vf_coef * v
        with torch.no_grad():
            stats = torch.stack(
                [
                    pg.mean(),
                    v.mean(),
                    entropy.mean(),
                    ((ratio - 1) - logratio).mean(),
                    (-logratio).mean(),
                    ((ratio - 1.0).abs() > eps).float().mean(),
                ]
            ).tolist()
        names = ("pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac")
        return LossOutput(per_item.sum(), int(per_item.shape[0]), dict(zip(names, stats, strict=True)))
