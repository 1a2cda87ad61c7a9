"""Asynchronous GRPO (trainer.max_staleness): 0 is the synchronous trainer bit for bit; 1 generates
round r with the policy after r − 1 updates; truncated importance sampling logs its statistics;
a SIGKILLed run resumes to the uninterrupted run's weights bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from tests.trainer.grpo_setup import GRPO as GRPO_BASE
from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.core.registries import REWARDS
from toolbox.experiment import ExperimentBuilder, load_config

torch.set_num_threads(1)

GRPO = [
    *GRPO_BASE,
    "optimizer.lr=1e-2",
    "scheduler.warmup_steps=0",
    "+trainer.rewards.digit={name: _test_async_first_digit, weight: 1.0}",
]


@REWARDS.register("_test_async_first_digit")
def _first_char_digit(**_):
    """A dense reward for a random model: 1 when the completion starts with a digit."""

    def score(prompts, completions, **fields):
        return [float(c[:1].isdigit()) for c in completions]

    return score


@pytest.fixture
def grpo(tiny_overrides):
    return [o for o in tiny_overrides if not o.startswith("trainer.batch_size")] + GRPO


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _fit(overrides):
    parts = _build(overrides)
    metrics, rollouts = [], []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: metrics.append(d.metrics))
    parts.trainer.bus.subscribe(Event.ROLLOUT_END, lambda d: rollouts.append(d.payload["rollout"]))
    parts.trainer.fit()
    return parts, metrics, rollouts


def _weights(parts):
    return {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


def _assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_max_staleness_zero_is_the_synchronous_trainer_bit_for_bit(grpo, tmp_path):
    steps = [*grpo, "trainer.max_steps=3", "trainer.ppo_epochs=2", "trainer.minibatch_size=8"]
    sync, sync_m, sync_r = _fit([*steps, f"run_dir={tmp_path / 'sync'}"])
    zero, zero_m, zero_r = _fit([*steps, f"run_dir={tmp_path / 'zero'}", "trainer.max_staleness=0"])
    assert sync.trainer.producer is None and zero.trainer.shared_engine  # 0: the thread, same engine
    assert [m["loss"] for m in zero_m] == [m["loss"] for m in sync_m]
    assert [m["grad_norm"] for m in zero_m] == [m["grad_norm"] for m in sync_m]
    assert [m["async/staleness"] for m in zero_m] == [0.0, 0.0, 0.0]
    assert "async/staleness" not in sync_m[0]
    for a, b in zip(sync_r, zero_r, strict=True):
        assert torch.equal(a.completion_ids, b.completion_ids)
    _assert_bitwise_equal(_weights(sync), _weights(zero))


def test_max_staleness_one_generates_round_r_with_the_policy_after_r_minus_1_updates(grpo, tmp_path):
    steps = [*grpo, "trainer.max_steps=3"]
    run, metrics, rollouts = _fit([*steps, f"run_dir={tmp_path / 'async'}", "trainer.max_staleness=1"])
    trainer = run.trainer
    assert not trainer.shared_engine and trainer.engine.model is not run.model
    assert [m["async/staleness"] for m in metrics] == [0.0, 1.0, 1.0]
    for key in ("async/trainer_wait_s", "async/producer_wait_s", "async/snapshot_s"):
        assert all(m[key] >= 0 for m in metrics), key
    # round 1 comes from the initial policy, round 2 from the policy after one update (the
    # synchronous trainer's first update: the same round 0, the same policy)
    sync = _build([*steps, f"run_dir={tmp_path / 'sync'}"])
    batches = [sync.trainer.loader.next_batch() for _ in range(3)]
    initial = [sync.trainer.rollout(b, round_index=r) for r, b in enumerate(batches)]
    assert torch.equal(initial[1].completion_ids, rollouts[1].completion_ids)
    sync.trainer.loader.load_state_dict({"epoch": 0, "offset": 0, "seed": sync.trainer.loader.seed})
    sync.trainer.bus.subscribe(Event.STEP_END, lambda d: d.trainer.request_stop("version 1"))
    sync.trainer.fit()
    sync = _build([*steps, f"run_dir={tmp_path / 'sync'}"])
    assert sync.trainer._resume("auto") == 1
    after_one = sync.trainer.rollout(batches[2], round_index=2)
    sync.trainer.teardown()
    assert torch.equal(after_one.completion_ids, rollouts[2].completion_ids)
    assert not torch.equal(initial[2].completion_ids, rollouts[2].completion_ids)  # not 2 behind
    # the engine ends with the weights of the last round it generated (version 2), not the policy's
    engine = dict(trainer.engine.model.named_parameters())
    assert any(not torch.equal(p, engine[n]) for n, p in run.model.named_parameters())


def test_importance_sampling_correction_logs_its_statistics(grpo, tmp_path):
    common = [*grpo, "trainer.max_steps=3", "trainer.importance_sampling_correction=true",
              "trainer.temperature=1.5"]  # fmt: skip
    _, zero, _ = _fit([*common, f"run_dir={tmp_path / 'zero'}", "trainer.max_staleness=0"])
    for m in zero:  # the same policy sampled and scores: ratios of 1 up to the kernels' rounding
        assert m["is/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert m["is/ratio_min"] == pytest.approx(1.0, abs=1e-3) and m["is/ratio_max"] == pytest.approx(
            1.0, abs=1e-3
        )
        assert m["is/clip_fraction"] == 0.0
    run, stale, _ = _fit(
        [
            *common,
            f"run_dir={tmp_path / 'stale'}",
            "trainer.max_staleness=1",
            "trainer.importance_sampling_cap=1.01",
        ]
    )
    assert stale[0]["is/ratio_max"] == pytest.approx(1.0, abs=1e-3)  # round 0: no update yet
    later = stale[1:]  # generated one update behind: the ratios spread and the cap bites
    assert all(m["is/ratio_max"] > 1.01 and 0 < m["is/clip_fraction"] < 1 for m in later)
    assert all(m["is/ratio_min"] <= m["is/ratio_mean"] <= m["is/ratio_max"] for m in stale)


def test_a_rounds_sampling_logprobs_do_not_depend_on_when_its_requests_reach_the_engine(
    grpo, tmp_path, monkeypatch
):
    """The cause of an IS-corrected resume off by ~1e-7: a round's requests submitted one by one, the
    engine thread (woken by the first) could prefill and decode it alone while the producer thread
    still submitted the rest; the batch's rows then differ, and with them the log-probs' rounding."""
    parts = _build([*grpo, f"run_dir={tmp_path / 'run'}", "trainer.importance_sampling_correction=true"])
    trainer = parts.trainer
    batch = trainer.loader.next_batch()
    together = trainer.rollout(batch, round_index=0)
    submit = trainer.engine.batcher.submit

    def slow_submit(*args, **kwargs):
        handle = submit(*args, **kwargs)
        time.sleep(0.05)  # a busy machine: the engine thread runs before the next request arrives
        return handle

    monkeypatch.setattr(trainer.engine.batcher, "submit", slow_submit)
    late = trainer.rollout(batch, round_index=0)
    trainer.teardown()
    assert torch.equal(together.completion_ids, late.completion_ids)
    assert together.sampling_logprobs is not None
    assert torch.equal(together.sampling_logprobs, late.sampling_logprobs)


def test_importance_sampling_at_a_temperature_needs_processed_logprobs(grpo, tmp_path):
    engine = "+engine={name: torch, max_batch_size: 16, logprobs_mode: raw}"
    with pytest.raises(ConfigError, match="engine.logprobs_mode=processed"):
        _build([*grpo, engine, "trainer.importance_sampling_correction=true", "trainer.temperature=1.5"])


def test_max_staleness_needs_seeded_sampling(grpo):
    with pytest.raises(ConfigError, match="trainer.seed_sampling=true"):
        _build([*grpo, "trainer.max_staleness=1", "trainer.seed_sampling=false"])


def test_metrics_reach_metrics_jsonl(grpo, tmp_path):
    run_dir = tmp_path / "run"
    _fit([*grpo, "trainer.max_steps=2", f"run_dir={run_dir}", "trainer.max_staleness=1",
          "callbacks=default", "~callbacks.console", "trainer.importance_sampling_correction=true"])  # fmt: skip
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "async/staleness" in json.dumps(r)]
    assert len(steps) == 2
    text = json.dumps(steps[-1])
    for key in (
        "async/staleness",
        "async/trainer_wait_s",
        "async/producer_wait_s",
        "is/ratio_mean",
        "is/clip_fraction",
    ):
        assert key in text, key


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    from toolbox.core.events import Event
    from toolbox.core.registries import REWARDS

    @REWARDS.register("_test_async_first_digit")
    def _first_char_digit(**_):
        return lambda prompts, completions, **f: [float(c[:1].isdigit()) for c in completions]

    from toolbox.experiment import ExperimentBuilder, load_config
    parts = ExperimentBuilder.from_config(load_config(sys.argv[1:])).build()
    def die(d):
        if d.step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    parts.trainer.bus.subscribe(Event.CHECKPOINT_SAVED, die)
    parts.trainer.fit()
""")


@pytest.mark.parametrize(("staleness", "correction"), [(1, False), (2, False), (1, True), (2, True)])
def test_sigkilled_async_run_resumes_bit_for_bit(grpo, tmp_path, staleness, correction):
    """With the importance-sampling correction too: the engine's sampling log-probs it reads must
    not depend on when the producer thread's requests reach the engine thread."""
    steps = [*grpo, "trainer.max_steps=5", "trainer.save_every=2", f"trainer.max_staleness={staleness}",
             "trainer.ppo_epochs=2", "trainer.minibatch_size=8",
             f"trainer.importance_sampling_correction={str(correction).lower()}"]  # fmt: skip
    full, full_m, full_r = _fit([*steps, f"run_dir={tmp_path / 'full'}"])
    run = [*steps, f"run_dir={tmp_path / 'killed'}"]
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, str(script), *run], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == -9, done.stderr[-2000:]
    state = torch.load(tmp_path / "killed/checkpoints/step_00000002/state.pt", weights_only=False)
    queued = state["extra"]["async"]["rounds"]
    assert [r.index for r in queued] == list(range(2, 2 + staleness))
    assert [r.version for r in queued] == [max(r - staleness, 0) for r in range(2, 2 + staleness)]
    for rnd in queued:  # as the engine sampled them in the killed run, the same numbers as the full run's
        assert torch.equal(rnd.rollout.completion_ids, full_r[rnd.index].completion_ids)
        if correction:
            assert torch.equal(rnd.rollout.sampling_logprobs, full_r[rnd.index].sampling_logprobs)
    resumed, resumed_m, _ = _fit([*run, "resume_from=auto"])
    assert resumed.trainer.step == 5 and len(resumed_m) == 3
    assert [m["loss"] for m in resumed_m] == [m["loss"] for m in full_m[2:]]
    _assert_bitwise_equal(_weights(resumed), _weights(full))


def test_resuming_with_another_max_staleness_is_refused(grpo, tmp_path):
    run = [*grpo, "trainer.max_steps=3", "trainer.save_every=2", f"run_dir={tmp_path / 'run'}"]
    first = _build([*run, "trainer.max_staleness=1"])
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 2 and d.trainer.request_stop("test"))
    first.trainer.fit()
    with pytest.raises(ConfigError, match="max_staleness=1; resume with that value"):
        _build([*run, "trainer.max_staleness=2", "resume_from=auto"]).trainer.fit()
