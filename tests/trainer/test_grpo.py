"""The GRPO trainer on a tiny Llama: one step changes the weights and logs every metric, the engine
sees the new weights, a raising reward is logged and skipped, resume equals an uninterrupted run."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.trainer.grpo_setup import GRPO
from toolbox.core.events import Event
from toolbox.core.registries import REWARDS
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.nn.llama_training import LlamaTrainingForward

torch.set_num_threads(1)


@pytest.fixture
def grpo_overrides(tiny_overrides):
    return [o for o in tiny_overrides if not o.startswith("trainer.batch_size")] + GRPO


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _record(parts):
    out = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: out.append(d.metrics))
    return out


@REWARDS.register("_test_first_char_digit")
def _first_char_digit(**_):
    """A dense reward for a random model: 1 when the completion starts with a digit."""

    def score(prompts, completions, **fields):
        return [float(c[:1].isdigit()) for c in completions]

    return score


@REWARDS.register("_test_raises")
def _raises(**_):
    def broken(prompts, completions, **fields):
        raise RuntimeError("boom")

    return broken


DENSE = "+trainer.rewards.digit={name: _test_first_char_digit, weight: 1.0}"


def test_one_step_changes_weights_and_logs_metrics(grpo_overrides):
    parts = _build(
        [
            *grpo_overrides,
            "trainer.max_steps=1",
            DENSE,
            "objective.beta=0.05",
            "trainer.ppo_epochs=2",
            "trainer.minibatch_size=8",
            "optimizer.lr=1e-2",
        ]
    )
    trainer = parts.trainer
    assert trainer.reference is not None and trainer.shared_engine
    before = {n: p.detach().clone() for n, p in parts.model.named_parameters()}
    metrics = _record(parts)
    trainer.fit()
    m = metrics[0]
    for key in (
        "reward",
        "reward_std",
        "rewards/correct/mean",
        "rewards/correct/std",
        "rewards/digit/mean",
        "rewards/digit/std",
        "kl",
        "clip_ratio/region",
        "entropy",
        "completions/mean_length",
        "rollout_time",
        "update_time",
        "rollout_tokens_per_s",
        "loss",
        "grad_norm",
    ):
        assert key in m, key
    assert m["optimizer_steps"] == 4.0  # 2 epochs × 16 rows / 8
    changed = [n for n, p in parts.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed


def test_weights_synced_into_a_separate_engine(grpo_overrides, tmp_path):
    """An engine with its own copy of the model (loaded from a folder) gets the trained weights."""
    parts = _build([*grpo_overrides, "trainer.max_steps=1", DENSE, "optimizer.lr=1e-2"])
    parts.model.save_pretrained(tmp_path / "m")
    parts.tokenizer.save_pretrained(tmp_path / "m")
    parts = _build(
        [
            *grpo_overrides,
            "trainer.max_steps=1",
            DENSE,
            "optimizer.lr=1e-2",
            "+engine={name: torch, path: " + str(tmp_path / "m") + ", device: cpu, max_batch_size: 16}",
        ]
    )
    trainer = parts.trainer
    assert not trainer.shared_engine and trainer.engine.model is not parts.model
    trainer.fit()
    engine_params = dict(trainer.engine.model.named_parameters())
    for n, p in parts.model.named_parameters():
        assert torch.equal(p.detach(), engine_params[n].detach()), n


def test_shared_engine_generates_with_updated_weights(grpo_overrides):
    from toolbox.serving.engine import SamplingParams

    parts = _build([*grpo_overrides, "trainer.max_steps=1"])
    engine = parts.trainer.engine
    prompt = parts.train_data[0]["prompt_ids"]
    greedy = SamplingParams(max_tokens=4, temperature=0, logprobs=True)
    lp0 = engine.generate([prompt], greedy)[0].completions[0].logprobs
    with torch.no_grad():
        parts.model.get_output_embeddings().weight.mul_(3.0)  # an in-place update, as an optimizer does
    lp1 = engine.generate([prompt], greedy)[0].completions[0].logprobs
    assert lp0 != lp1
    engine.shutdown()


def test_default_engine_keeps_no_prefix_cache_and_generates_in_train_mode(grpo_overrides):
    """Every round follows an update, so the cache could never serve a round: GRPO's default torch
    engine keeps none; its forward reads no module mode, so the policy is not switched to eval."""
    parts = _build([*grpo_overrides, "trainer.max_steps=1"])
    trainer = parts.trainer
    assert trainer.engine.batcher.prefix_cache is None and trainer.engine.mode_independent
    modes = []
    submit = trainer.engine.submit_requests
    trainer.engine.submit_requests = lambda *a, **k: modes.append(parts.model.training) or submit(*a, **k)
    trainer.fit()
    assert modes == [True]


def test_raising_reward_is_logged_and_skipped(grpo_overrides, caplog):
    parts = _build(
        [*grpo_overrides, "trainer.max_steps=2", DENSE, "+trainer.rewards.bad={name: _test_raises}"]
    )
    metrics = _record(parts)
    with caplog.at_level(logging.WARNING):
        parts.trainer.fit()
    assert any("'bad'" in r.getMessage() and "boom" in r.getMessage() for r in caplog.records)
    assert len(metrics) == 2
    assert metrics[-1]["rewards/bad/errors"] == 2.0
    assert metrics[-1]["rewards/bad/skipped"] == 16.0
    assert metrics[-1]["reward"] == metrics[-1]["rewards/digit/mean"] + metrics[-1]["rewards/correct/mean"]


def test_mask_truncated_completions(grpo_overrides):
    parts = _build([*grpo_overrides, "trainer.max_steps=1", "trainer.mask_truncated_completions=true"])
    trainer = parts.trainer
    rollout = trainer.rollout(trainer.loader.next_batch())
    for r, reason in enumerate(rollout.finish_reasons):
        if reason == "length":
            assert rollout.completion_mask[r].sum() == 0


@REWARDS.register("_test_constant")
def _constant(**_):
    def score(prompts, completions, **fields):
        return [1.0 for _ in completions]

    return score


DYNAMIC = ["+trainer.dynamic_sampling=true", "+trainer.max_sampling_draws=3"]


def test_dynamic_sampling_trains_only_on_groups_whose_rewards_differ(grpo_overrides):
    parts = _build([*grpo_overrides, *DYNAMIC, "trainer.max_steps=1", DENSE, "optimizer.lr=1e-2"])
    trainer = parts.trainer
    trained, drawn = [], []
    collect = trainer.collect

    def record(*args):
        rnd = collect(*args)
        trained.append(rnd.rollout)
        return rnd

    trainer.collect = record
    trainer.bus.subscribe(Event.ROLLOUT_END, lambda d: drawn.append(d.payload["rollout"]))
    metrics = _record(parts)
    trainer.fit()
    (rollout,) = trained
    groups = rollout.rewards.view(-1, 4)
    assert len(groups) >= 1 and all(len(set(g.tolist())) > 1 for g in groups)
    informative = sum(len(r.informative_rows()) // 4 for r in drawn)
    assert (
        metrics[0]["sampling/draws"] == len(drawn)
        and metrics[0]["sampling/informative_groups"] == informative
    )
    assert len(groups) == min(informative, 4) and (informative >= 4 or len(drawn) == 3)
    assert trainer.loader.offset == len(drawn)  # every draw took the next prompts


def test_dynamic_sampling_without_an_informative_group_keeps_the_first_draw(grpo_overrides):
    constant = "+trainer.rewards.const={name: _test_constant, weight: 1.0}"
    parts = _build(
        [*grpo_overrides, *DYNAMIC, "trainer.max_steps=1", constant, "trainer.rewards.correct.weight=0"]
    )
    metrics = _record(parts)
    parts.trainer.fit()
    assert metrics[0]["sampling/draws"] == 3 and metrics[0]["sampling/informative_groups"] == 0
    assert metrics[0]["reward"] == 1.0 and metrics[0]["frac_reward_zero_std"] == 1.0


@pytest.mark.parametrize("dynamic", [[], DYNAMIC], ids=["plain", "dynamic_sampling"])
def test_resume_equals_uninterrupted(grpo_overrides, tmp_path, dynamic):
    common = [*grpo_overrides, *dynamic, DENSE, "optimizer.lr=1e-2", "trainer.max_steps=4"]
    full = _build([*common, f"run_dir={tmp_path / 'full'}"])
    full.trainer.fit()
    first = _build([*common, f"run_dir={tmp_path / 'split'}", "trainer.max_steps=2"])
    first.trainer.fit()
    second = _build([*common, f"run_dir={tmp_path / 'split'}", "resume_from=auto"])
    seen = _record(second)
    second.trainer.fit()
    assert len(seen) == 2 and second.trainer.step == 4
    for (n, a), b in zip(full.model.named_parameters(), second.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=n)


def test_policy_family_is_required(grpo_overrides):
    from toolbox.core.errors import ConfigError

    with pytest.raises(ConfigError, match="policy"):
        _build([*grpo_overrides, "objective=causal_lm"])


def test_perplexity_of_a_prompt_only_run_scores_the_reference_answers(grpo_overrides):
    """eval=lm (the workflow's in-training default) on GRPO's prompt-only data: the loss of the
    held-out reference answers, equal to a supervised run's eval of the same model and records."""
    scored = [o for o in grpo_overrides if o != "eval=none"] + ["eval=lm"]
    grpo = _build(scored)
    assert "input_ids" not in grpo.eval_data[0]
    metrics = grpo.trainer.evaluate()

    sft = [o for o in grpo_overrides if o not in GRPO] + ["eval=lm"]
    reference = _build(sft)
    reference.model.load_state_dict(grpo.model.state_dict())
    expected = reference.trainer.evaluate()
    assert metrics["eval/loss"] > 0
    assert metrics["eval/loss"] == pytest.approx(expected["eval/loss"], rel=1e-6)
    assert metrics["eval/token_accuracy"] == pytest.approx(expected["eval/token_accuracy"])


@pytest.mark.parametrize(
    ("forward", "prompts"), [("exact", "one_length"), ("lean", "one_length"), ("lean", "left_padded")]
)
def test_the_lean_forward_gives_the_models_log_probs(grpo_overrides, tmp_path, forward, prompts):
    """trainer.forward: exact is the model's forward bit for bit; lean equal up to float rounding,
    on prompts of one length (zero-padded two-digit sums) and on left-padded ones (1-3 digits)."""
    data = (
        ["data.source.digits=2", "data.source.zero_pad=true"]
        if prompts == "one_length"
        else ["data.source.digits=3"]
    )
    same_length = [*data, "objective.beta=0.04", "trainer.max_steps=3", DENSE, "optimizer.lr=1e-2"]
    runs = {}
    for kind in ("model", forward):
        parts = _build(
            [*grpo_overrides, *same_length, f"trainer.forward={kind}", f"run_dir={tmp_path / kind}"]
        )
        lean = parts.trainer._policy_forward
        if kind != "model":
            assert (
                isinstance(lean, LlamaTrainingForward) and parts.trainer._reference_forward is not parts.model
            )
            calls = []
            inner = lean._forward
            lean._forward = lambda *a, _calls=calls, _inner=inner, **k: _calls.append(1) or _inner(*a, **k)
        metrics = _record(parts)
        parts.trainer.fit()
        if kind != "model":
            assert len(calls) == 3  # each step's policy forward took the lean path
        runs[kind] = (metrics, {k: v.clone() for k, v in parts.model.state_dict().items()})
    (base, base_w), (other, other_w) = runs["model"], runs[forward]
    if forward == "exact":
        assert [m["loss"] for m in other] == [m["loss"] for m in base]
        assert all(torch.equal(base_w[k], other_w[k]) for k in base_w)
    else:
        assert [m["loss"] for m in other] == pytest.approx([m["loss"] for m in base], abs=1e-5)
        assert all(torch.allclose(base_w[k], other_w[k], atol=1e-4) for k in base_w)
