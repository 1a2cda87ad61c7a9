"""preference_packed: DPO on packed pairs (no padding, position ids restarted, attention kept to
each sequence) takes the same steps as on the padded batch, within float tolerance."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.objectives.logprobs import completion_logps

PAIRS = [
    "data=arithmetic_pairs",
    "trainer=preference",
    "objective=dpo",
    "eval=none",
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "trainer.batch_size=8",
    "trainer.max_steps=3",
]
PACKED = ["data.collator.name=preference_packed", "data.collator.max_length=64"]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


@pytest.mark.parametrize("forward", ["lean", "model"])
def test_packed_pairs_take_the_same_steps_as_padded_ones(tiny_overrides, forward):
    padded = _build([*tiny_overrides, *PAIRS, f"trainer.forward={forward}"])
    packed = _build([*tiny_overrides, *PAIRS, *PACKED, f"trainer.forward={forward}"])
    examples = padded.train_data[:8]
    a, b = padded.trainer.collate(list(examples)), packed.trainer.collate(list(examples))
    assert b["num_sequences"] == a["input_ids"].shape[0] == 16
    assert int((b["segments"] >= 0).sum()) == int(a["attention_mask"].sum())  # every token, once
    with torch.no_grad():
        sums_a, lengths_a = completion_logps(padded.model, a)
        sums_b, lengths_b = completion_logps(packed.model, b)
    torch.testing.assert_close(sums_b, sums_a, rtol=1e-5, atol=1e-4)
    assert torch.equal(lengths_a, lengths_b)
    for _ in range(3):
        x, y = padded.trainer.train_step(), packed.trainer.train_step()
        assert y["loss"] == pytest.approx(x["loss"], abs=1e-5)
    for p, q in zip(padded.model.parameters(), packed.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-4)


def test_packed_pairs_refuse_kto(tiny_overrides):
    with pytest.raises(ConfigError, match="preference_packed"):
        _build([*tiny_overrides, *PAIRS, *PACKED, "objective=kto"])
