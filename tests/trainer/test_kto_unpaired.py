"""KTO on unpaired data in the preference trainer, on a tiny Llama: one forward over the examples
and their mismatched rows, learning, TRL's metrics, the precomputed reference, resume, and the
configurations that must fail fast."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.objectives.kto import merge_unpaired_metrics

UNPAIRED = [
    "data=arithmetic_unpaired",
    "trainer=preference",
    "objective=kto",
    "eval=none",
    "trainer.eval_every=0",
    "trainer.save_every=0",
]

METRICS = (
    "loss",
    "kl",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
    "count/chosen",
    "count/rejected",
    "accuracy",
    "grad_norm",
    "step_time",
)


@pytest.fixture
def kto_overrides(tiny_overrides):
    return [
        *tiny_overrides,
        *UNPAIRED,
        "trainer.batch_size=8",
        "trainer.forward=model",
    ]  # module hooks count rows


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _steps(parts):
    out = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: out.append(d.metrics))
    return out


class CountingForward:
    def __init__(self, module):
        self.rows = []
        module.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.rows.append(kwargs["input_ids"].shape[0])


def test_kto_trains_on_unpaired_examples(kto_overrides):
    parts = _build(
        [
            *kto_overrides,
            "data.source.max_train=32",
            "trainer.max_steps=20",
            "optimizer.lr=3e-3",
            "scheduler.warmup_steps=2",
            "objective.beta=0.5",
        ]
    )
    assert parts.train_data[0]["label"] in (True, False) and "completion_ids" in parts.train_data[0]
    start = parts.trainer.evaluate()
    assert start["eval/loss"] == pytest.approx(0.5) and start["eval/kl"] == 0.0  # policy == reference
    assert start["eval/accuracy"] == 0.0 and start["eval/rewards/chosen"] == 0.0
    before = [p.detach().clone() for p in parts.model.parameters()]
    policy, reference = CountingForward(parts.model), CountingForward(parts.trainer.reference)
    steps = _steps(parts)
    final = parts.trainer.fit()
    assert policy.rows[0] == 16 and reference.rows[0] == 16  # 8 examples + their 8 mismatched rows
    assert len(steps) == 20
    for key in METRICS:
        assert key in steps[0], key
    assert (
        steps[0]["loss"] == pytest.approx(0.5) and steps[0]["count/chosen"] + steps[0]["count/rejected"] == 8
    )
    assert any(not torch.equal(p, q) for p, q in zip(before, parts.model.parameters(), strict=True))
    first, last = sum(m["loss"] for m in steps[:5]) / 5, sum(m["loss"] for m in steps[-5:]) / 5
    assert last < first - 0.05
    for key in (
        "eval/loss",
        "eval/kl",
        "eval/rewards/chosen",
        "eval/rewards/rejected",
        "eval/margin",
        "eval/accuracy",
        "eval/count/chosen",
        "eval/count/rejected",
    ):
        assert key in final, key
    assert final["eval/count/chosen"] + final["eval/count/rejected"] == len(parts.eval_data)
    with torch.no_grad():
        train = parts.trainer.preference_metrics(parts.model.eval(), parts.train_data)
    # the desirable completions' implicit reward rises above the undesirable ones' on the trained data
    assert train["eval/rewards/chosen"] > train["eval/rewards/rejected"]
    assert train["eval/accuracy"] > 0.75


def test_precomputed_reference_gives_the_same_step(kto_overrides):
    live = _build([*kto_overrides, "trainer.max_steps=1"])
    pre = _build([*kto_overrides, "trainer.max_steps=1", "trainer.precompute_ref_logprobs=true"])
    pre.trainer.setup()
    assert "ref_logps" in pre.trainer.train_examples[0] and "ref_logps" in pre.trainer.eval_examples[0]
    assert "ref_logps" not in pre.train_data[0]  # the data set's records are not written into
    assert pre.trainer.reference is not None  # kept for the mismatched rows, which change per batch
    reference = CountingForward(pre.trainer.reference)
    a, b = live.trainer.train_step(), pre.trainer.train_step()
    assert reference.rows == [8]  # only the mismatched rows
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6) and a["kl"] == pytest.approx(b["kl"], abs=1e-6)
    for p, q in zip(live.model.parameters(), pre.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_resume_continues_the_same_curve(kto_overrides, tmp_path):
    run = [*kto_overrides, "trainer.max_steps=4", f"run_dir={tmp_path / 'r'}", "callbacks=none"]
    full = _build(run)
    full_steps = _steps(full)
    full.trainer.fit()
    half = _build([*run, f"run_dir={tmp_path / 'h'}", "trainer.save_every=2", "trainer.max_steps=2"])
    half.trainer.fit()
    resumed = _build([*run, f"run_dir={tmp_path / 'h'}", "resume_from=auto"])
    resumed_steps = _steps(resumed)
    resumed.trainer.fit()
    assert len(resumed_steps) == 2
    for key in ("loss", "kl", "rewards/chosen", "count/chosen"):
        assert [m[key] for m in resumed_steps] == pytest.approx([m[key] for m in full_steps[2:]], abs=1e-6), (
            key
        )


def test_accumulated_metrics_weight_each_side_by_its_count():
    merged = merge_unpaired_metrics(
        [
            {
                "kl": 0.2,
                "count/chosen": 3.0,
                "count/rejected": 1.0,
                "rewards/chosen": 1.0,
                "rewards/rejected": -1.0,
                "rewards/margins": 2.0,
                "rewards/label_accuracy": 0.5,
            },
            {
                "kl": 0.4,
                "count/chosen": 0.0,
                "count/rejected": 4.0,
                "rewards/rejected": -3.0,
                "rewards/label_accuracy": 1.0,
            },
        ]
    )
    assert merged["count/chosen"] == 3 and merged["count/rejected"] == 5
    assert merged["rewards/chosen"] == pytest.approx(1.0)
    assert merged["rewards/rejected"] == pytest.approx((-1.0 - 12.0) / 5)
    assert merged["rewards/margins"] == pytest.approx(1.0 + 13.0 / 5)
    assert merged["kl"] == pytest.approx(0.3) and merged["rewards/label_accuracy"] == pytest.approx(0.75)


@pytest.mark.parametrize("objective", ["dpo", "simpo", "ipo", "orpo"])
def test_pair_objectives_on_unpaired_data_fail_fast(kto_overrides, objective):
    with pytest.raises(ConfigError, match=rf"'{objective}' needs chosen/rejected pairs.*objective=kto"):
        _build([*kto_overrides, f"objective={objective}"])


def test_mismatched_data_and_collator_and_batch_size_fail_fast(kto_overrides, tiny_overrides):
    with pytest.raises(ConfigError, match=r"data.collator.name=unpaired_preference_pad\b"):
        _build([*kto_overrides, "data.collator.name=preference_pad"])
    with pytest.raises(ConfigError, match="data.dataset.name=unpaired_preference"):
        _build(
            [
                *tiny_overrides,
                "data=arithmetic_pairs",
                *UNPAIRED[1:],
                "data.collator.name=unpaired_preference_pad",
            ]
        )
    with pytest.raises(ConfigError, match="trainer.batch_size: 1"):
        _build([*kto_overrides, "trainer.batch_size=1"])
    with pytest.raises(ConfigError, match="unpaired_preference_pad"):
        _build([*kto_overrides, "data.collator.name=pad"])


def test_kto_arith_experiment_composes():
    cfg = load_config(["experiment=kto_arith"])
    assert cfg.data.source.name == "arithmetic_unpaired" and cfg.objective.name == "kto"
    assert cfg.data.dataset.name == "unpaired_preference"
    assert cfg.data.collator.name == "unpaired_preference_pad"
    assert cfg.eval.exact_match.reference_field == "reference"
