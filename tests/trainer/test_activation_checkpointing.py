"""trainer.activation_checkpointing: the same losses and weights as without it, for full models and
LoRA adapters, through the supervised and preference trainers; a clear error where it cannot apply."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

torch.set_num_threads(1)


def _run(overrides):
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    losses = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: losses.append(d.metrics["loss"]))
    parts.trainer.fit()
    return parts, losses


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["peft=lora"],
        ["data=arithmetic_pairs", "trainer=preference", "objective=dpo", "data.source.num_train=64"],
    ],
    ids=["sft", "sft-lora", "dpo"],
)
def test_checkpointing_changes_no_number(tiny_overrides, extra):
    base = [*tiny_overrides, *extra, "trainer.max_steps=3", "trainer.forward=model", "model.num_layers=2"]
    plain, plain_losses = _run(base)
    ckpt, ckpt_losses = _run([*base, "trainer.activation_checkpointing=true"])
    model = getattr(ckpt.model, "get_base_model", lambda: ckpt.model)()
    assert model.is_gradient_checkpointing
    assert ckpt_losses == pytest.approx(plain_losses, abs=1e-6)
    for (name, a), b in zip(plain.model.state_dict().items(), ckpt.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_a_model_without_it_names_the_fix(tiny_overrides):
    with pytest.raises(ConfigError, match="activation_checkpointing.*Hugging Face models"):
        ExperimentBuilder.from_config(
            load_config(
                [
                    *[o for o in tiny_overrides if not o.startswith("model.")],
                    "model=transformer_lm",
                    "trainer.activation_checkpointing=true",
                ]
            )
        ).build()
