"""trainer=trl_sft and trainer=trl_grpo train a few steps from the same config and data, and export."""

from __future__ import annotations

import torch

from toolbox.core.events import Event
from toolbox.core.registries import REWARDS
from toolbox.experiment import ExperimentBuilder, load_config

torch.set_num_threads(1)


@REWARDS.register("_test_trl_digit")
def _digit(**_):
    """A dense reward for a random model: 1 when the completion starts with a digit."""
    return lambda prompts, completions, **fields: [float(c[:1].isdigit()) for c in completions]


def _fit(overrides):
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    seen = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: seen.append(d.metrics))
    before = {n: p.detach().clone() for n, p in parts.model.named_parameters()}
    parts.trainer.fit()
    changed = [n for n, p in parts.model.named_parameters() if not torch.equal(p, before[n])]
    return parts, seen, changed


def test_trl_sft_trains_a_few_steps(tiny_overrides):
    parts, seen, changed = _fit(
        [*tiny_overrides, "trainer=trl_sft", "trainer.max_steps=3", "trainer.batch_size=8"]
    )
    assert parts.trainer.step == 3 and len(seen) == 3 and changed
    assert all("loss" in m for m in seen)


def test_trl_grpo_trains_a_few_steps(tiny_overrides, tmp_path):
    overrides = [o for o in tiny_overrides if not o.startswith(("trainer.batch_size", "callbacks="))]
    parts, seen, changed = _fit(
        [
            *overrides,
            "trainer=trl_grpo",
            "objective=grpo",
            "data.dataset.name=prompt_only",
            "eval=none",
            "callbacks=none",
            "+callbacks.checkpoint={name: checkpoint}",
            "trainer.max_steps=2",
            "trainer.prompts_per_step=2",
            "trainer.num_generations=4",
            "trainer.max_completion_length=4",
            "objective.beta=0.05",
            "optimizer.lr=1e-2",
            "+trainer.rewards.digit={name: _test_trl_digit}",
        ]
    )
    assert parts.trainer.step == 2 and len(seen) == 2 and changed
    assert "rewards/correct/mean" in seen[0] and "rewards/digit/mean" in seen[0] and "kl" in seen[0]
    assert (tmp_path / "run" / "model" / "config.json").exists()
