"""The preference trainer on a tiny Llama: learning, one concatenated forward, the reference
(on the fly, precomputed, absent), accumulation, resume, KTO's mismatched rows, Bradley–Terry."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

PAIRS = [
    "data=arithmetic_pairs",
    "trainer=preference",
    "objective=dpo",
    "eval=none",
    "trainer.eval_every=0",
    "trainer.save_every=0",
]


@pytest.fixture
def pref_overrides(tiny_overrides):
    return [*tiny_overrides, *PAIRS, "trainer.batch_size=8"]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _losses(parts):
    out = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: out.append(d.metrics))
    return out


def test_dpo_fits_its_pairs_and_reports_metrics(pref_overrides):
    """A random-init model knows no arithmetic (held-out learning is examples/dpo_arith's job), but
    DPO must drive the preference accuracy on the pairs it trains on to 1."""
    parts = _build(
        [
            *pref_overrides,
            "data.source.max_train=16",
            "trainer.max_steps=25",
            "optimizer.lr=3e-3",
            "scheduler.warmup_steps=2",
            "objective.beta=0.5",
        ]
    )
    start = parts.trainer.evaluate()
    assert start["eval/accuracy"] == 0.0 and start["eval/margin"] == 0.0  # policy == reference
    metrics = _losses(parts)
    final = parts.trainer.fit()
    assert len(metrics) == 25 and "eval/accuracy" in final
    for key in (
        "loss",
        "accuracy",
        "margin",
        "rewards/chosen",
        "rewards/rejected",
        "rewards/accuracies",
        "rewards/margins",
        "grad_norm",
        "step_time",
    ):
        assert key in metrics[0], key
    first, last = sum(m["loss"] for m in metrics[:5]) / 5, sum(m["loss"] for m in metrics[-5:]) / 5
    assert last < 0.5 * first
    with torch.no_grad():
        train = parts.trainer.preference_metrics(parts.model.eval(), parts.train_data)
    assert train["eval/accuracy"] == 1.0 and train["eval/margin"] > 0


class CountingForward:
    def __init__(self, module):
        self.calls, self.rows = 0, []
        module.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.calls += 1
        self.rows.append(kwargs["input_ids"].shape[0])


def test_one_concatenated_forward_per_model(pref_overrides):
    parts = _build([*pref_overrides, "trainer.max_steps=1", "trainer.forward=model"])  # the modules' forwards
    policy, reference = CountingForward(parts.model), CountingForward(parts.trainer.reference)
    parts.trainer.train_step()
    assert policy.calls == 1 and policy.rows == [16]  # 8 chosen + 8 rejected rows
    assert reference.calls == 1 and reference.rows == [16]
    assert not any(p.requires_grad for p in parts.trainer.reference.parameters())


@pytest.mark.parametrize("forward", ["lean", "model"])
def test_reference_logps_are_the_no_grad_ones_as_a_plain_tensor(pref_overrides, forward):
    """The reference reads in inference mode (cheaper than no_grad): the same sums bit for bit, handed
    back as a plain tensor (an inference tensor could not be saved for the loss's backward)."""
    from toolbox.objectives.logprobs import completion_logps

    parts = _build([*pref_overrides, "trainer.max_steps=1", f"trainer.forward={forward}"])
    trainer = parts.trainer
    batch = trainer.to_device(trainer.loader.next_batch())
    sums = trainer.reference_logps(batch)
    assert not sums.is_inference() and not sums.requires_grad
    with torch.no_grad():
        assert torch.equal(sums, completion_logps(trainer._reference_forward, batch)[0])
    trainer.train_step()  # the loss takes them into its backward


def test_precomputed_reference_gives_the_same_step(pref_overrides):
    live = _build([*pref_overrides, "trainer.max_steps=1"])
    pre = _build(
        [
            *pref_overrides,
            "trainer.max_steps=1",
            "trainer.precompute_ref_logprobs=true",
            "trainer.forward=model",
        ]
    )
    pre.trainer.setup()
    assert pre.trainer.reference is None and pre.reference_model is None  # freed
    assert "ref_chosen_logps" in pre.trainer.train_examples[0]
    assert "ref_chosen_logps" not in pre.train_data[0]  # the data set's records are not written into
    policy = CountingForward(pre.model)
    a, b = live.trainer.train_step(), pre.trainer.train_step()
    assert policy.calls == 1
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    for p, q in zip(live.model.parameters(), pre.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_grad_accumulation_matches_one_large_batch(pref_overrides):
    big = _build([*pref_overrides, "trainer.max_steps=1", "trainer.batch_size=8"])
    big.trainer.train_step()
    small = _build(
        [*pref_overrides, "trainer.max_steps=1", "trainer.batch_size=4", "trainer.grad_accum_steps=2"]
    )
    small.trainer.train_step()
    for p, q in zip(big.model.parameters(), small.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("objective", ["simpo", "orpo"])
def test_reference_free_objectives_build_no_reference(pref_overrides, objective):
    parts = _build([*pref_overrides, f"objective={objective}", "trainer.max_steps=2"])
    assert parts.trainer.reference is None
    parts.trainer.fit()


@pytest.mark.parametrize("objective", ["ipo", "hinge", "robust_dpo"])
def test_other_pair_losses_run(pref_overrides, objective):
    parts = _build([*pref_overrides, f"objective={objective}", "trainer.max_steps=2"])
    assert parts.trainer.fit()["eval/loss"] > -1


def test_kto_scores_mismatched_pairs(pref_overrides):
    parts = _build([*pref_overrides, "objective=kto", "trainer.max_steps=1", "trainer.forward=model"])
    policy = CountingForward(parts.model)
    metrics = parts.trainer.train_step()
    assert policy.rows == [24]  # chosen, rejected, mismatched
    assert "kl" in metrics and metrics["kl"] >= 0


def test_resume_continues_the_same_curve(pref_overrides, tmp_path):
    run = [*pref_overrides, "trainer.max_steps=4", f"run_dir={tmp_path / 'r'}", "callbacks=none"]
    full = _build(run)
    full_losses = _losses(full)
    full.trainer.fit()
    half = _build([*run, f"run_dir={tmp_path / 'h'}", "trainer.save_every=2", "trainer.max_steps=2"])
    half.trainer.fit()
    resumed = _build([*run, f"run_dir={tmp_path / 'h'}", "resume_from=auto"])
    resumed_losses = _losses(resumed)
    resumed.trainer.fit()
    assert [m["loss"] for m in resumed_losses] == pytest.approx(
        [m["loss"] for m in full_losses[2:]], abs=1e-6
    )


def test_wrong_collator_and_wrong_family_fail_fast(pref_overrides):
    with pytest.raises(ConfigError, match=r"collator.name=preference_pad\b"):
        _build([*pref_overrides, "data.collator.name=pad"])
    with pytest.raises(ConfigError, match="preference objective"):
        _build([*pref_overrides, "objective=causal_lm"])


def test_bradley_terry_reward_model_and_learned_reward(pref_overrides, tmp_path):
    from toolbox.core.registries import REWARDS

    run = tmp_path / "rm"
    parts = _build(
        [
            *pref_overrides,
            "model=reward_model",
            "model.hidden_size=64",
            "model.num_layers=1",
            "objective=bradley_terry",
            "data.source.max_train=16",
            "trainer.max_steps=40",
            "optimizer.lr=3e-3",
            "scheduler.warmup_steps=2",
            f"run_dir={run}",
            "callbacks=default",
            "~callbacks.console",
        ]
    )
    assert parts.trainer.reference is None
    parts.trainer.fit()
    with torch.no_grad():
        train = parts.trainer.preference_metrics(parts.model.eval(), parts.train_data)
    assert train["eval/accuracy"] >= 0.85
    # the saved model, served as a reward, gives the scores the trained model gives in the trainer
    reward = REWARDS.build({"name": "learned", "path": str(run / "model")})
    records = parts.splits.train
    good = reward([r["prompt"] for r in records], [r["chosen"] for r in records])
    bad = reward([r["prompt"] for r in records], [r["rejected"] for r in records])
    wins = sum(g > b for g, b in zip(good, bad, strict=True)) / len(records)
    assert wins == pytest.approx(train["eval/accuracy"])
    batch = parts.collator(parts.train_data[:4])
    with torch.no_grad():
        scores = parts.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[
            :, 0
        ]
    torch.testing.assert_close(torch.tensor(good[:4]), scores[:4], atol=1e-5, rtol=1e-5)


def test_trl_dpo_backend_runs_from_the_same_config(pref_overrides, tmp_path):
    pytest.importorskip("trl")
    run = tmp_path / "trl"
    parts = _build(
        [
            *pref_overrides,
            "trainer=trl_dpo",
            "trainer.max_steps=3",
            "trainer.batch_size=4",
            "data.source.max_train=32",
            "trainer.max_eval_pairs=8",
            f"run_dir={run}",
        ]
    )
    steps = _losses(parts)
    final = parts.trainer.fit()
    assert parts.trainer.step == 3 and len(steps) == 3
    assert steps[0]["loss"] == pytest.approx(0.6931, abs=2e-3)  # policy == reference at the first step
    assert "rewards/accuracies" in steps[0] and "accuracy" in steps[0]
    assert "eval/accuracy" in final


def test_trl_dpo_rejects_objectives_trl_lacks(pref_overrides):
    with pytest.raises(ConfigError, match="no TRL DPOTrainer counterpart"):
        _build([*pref_overrides, "trainer=trl_dpo", "objective=simpo"])
    with pytest.raises(ConfigError, match="label smoothing"):
        _build([*pref_overrides, "trainer=trl_dpo", "objective.label_smoothing=0.1"])
