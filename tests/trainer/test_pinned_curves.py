"""The first five steps of the preference (DPO, KTO paired and unpaired) and GRPO trainers on a
tiny Llama, pinned as tests/trainer/test_supervised.py pins SFT (torchtune-style): a change to the
shared optimizer step, the reference, the rollout or an objective that moves any number shows here.

The numbers were recorded with torch 2.13 on CPU, seed 0, one thread (OMP_NUM_THREADS=1, tests/conftest.py), before the optimizer step
moved into ``BaseTrainer``; the refactor left them bitwise unchanged."""

from __future__ import annotations

import pytest

from tests.trainer.grpo_setup import GRPO as GRPO_BASE
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

PREFERENCE = [
    "trainer=preference",
    "eval=none",
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "trainer.batch_size=8",
    "optimizer.lr=1e-2",
]
PAIRS = ["data=arithmetic_pairs", *PREFERENCE]
UNPAIRED = ["data=arithmetic_unpaired", *PREFERENCE, "objective=kto"]
GRPO = [*GRPO_BASE, '+trainer.rewards.digit={name: format_regex, pattern: "[0-9].*", weight: 1.0}']

# name -> (overrides, losses, grad norms) of steps 1..5
PINNED = {
    "dpo": (
        [*PAIRS, "objective=dpo"],
        [0.69315, 0.69412, 0.69575, 0.69197, 0.67295],
        [0.4159, 0.3828, 0.3394, 0.3753, 0.3915],
    ),
    "kto_paired": (
        [*PAIRS, "objective=kto"],
        [0.5, 0.50024, 0.50064, 0.49968, 0.49484],
        [0.104, 0.0956, 0.0847, 0.094, 0.0996],
    ),
    "kto_unpaired": (
        UNPAIRED,
        [0.5, 0.50024, 0.50103, 0.49761, 0.49438],
        [0.1666, 0.1868, 0.1991, 0.202, 0.1893],
    ),
    "grpo": (  # beta > 0 (the reference), two epochs of two minibatches (the old log-probs)
        [
            *GRPO,
            "objective.beta=0.05",
            "trainer.ppo_epochs=2",
            "trainer.minibatch_size=8",
            "optimizer.lr=1e-2",
        ],
        [-0.04043, -0.01989, -0.03174, -0.02823, -0.01804],
        [1.64, 1.378, 1.7026, 1.4372, 0.9804],
    ),
    "dr_grpo_micro": (  # dr_grpo's normaliser from the trainer, micro-batches, no clipping
        [*GRPO, "objective.loss_type=dr_grpo", "trainer.micro_batch_size=4", "trainer.max_grad_norm=0"],
        [-0.11089, -0.01353, -0.02287, -0.0703, -0.05984],
        [1.0462, 1.3396, 1.2273, 0.8155, 1.3219],
    ),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_first_five_steps_are_pinned(name, tiny_overrides):
    overrides, losses, grad_norms = PINNED[name]
    base = tiny_overrides
    if name.startswith(("grpo", "dr_grpo")):
        base = [o for o in tiny_overrides if not o.startswith("trainer.batch_size")]
    parts = ExperimentBuilder.from_config(load_config([*base, *overrides, "trainer.max_steps=5"])).build()
    steps = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: steps.append(d.metrics))
    parts.trainer.fit()
    assert [m["loss"] for m in steps] == pytest.approx(losses, abs=2e-4)
    assert [m["grad_norm"] for m in steps] == pytest.approx(grad_norms, rel=2e-3, abs=2e-4)
