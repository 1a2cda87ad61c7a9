"""The ppo_env trainer: a short run's pinned curve, bitwise resume (env RNG, simulator and
normalisation statistics included), truncation bootstrapping, the evaluator, config errors."""

from __future__ import annotations

import json

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config

CARTPOLE = [
    "experiment=ppo_cartpole",
    "trainer.max_steps=3",
    "trainer.num_steps=32",
    "trainer.save_every=0",
    "~callbacks.console",
    "eval.episodes.num_episodes=2",
]
PENDULUM = [
    "experiment=ppo_pendulum",
    "env.num_envs=2",
    "trainer.max_steps=4",
    "trainer.num_steps=128",  # Pendulum truncates at 200 steps: every run below crosses episode ends
    "trainer.num_minibatches=2",
    "trainer.update_epochs=2",
    "trainer.save_every=2",
    "~callbacks.console",
    "eval.episodes.num_episodes=1",
]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _metrics(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if json.loads(x).get("split") == "train"]


def test_short_cartpole_run_pins_its_curve(tmp_path):
    parts = _build([*CARTPOLE, f"run_dir={tmp_path}"])
    assert parts.model.discrete and parts.model.actor.out_dim == 2  # env facts reached the model
    final = parts.trainer.fit()
    rows = _metrics(tmp_path)
    assert [r["global_step"] for r in rows] == [128.0, 256.0, 384.0]
    assert [r["update_epochs_done"] for r in rows] == [4.0] * 3
    # the lr is annealed once per iteration: 2.5e-4 × (1, 2/3, 1/3)
    assert [r["lr"] for r in rows] == pytest.approx([2.5e-4, 2.5e-4 * 2 / 3, 2.5e-4 / 3])
    pinned = [13.361950814723969, 16.009283304214478, 11.158850491046906]
    assert [r["loss"] for r in rows] == pytest.approx(pinned, rel=1e-5)
    assert {"approx_kl", "clipfrac", "explained_variance", "episode_return", "return_mean", "sps"} <= set(
        rows[-1]
    )
    assert set(final) == {
        "eval/return_mean",
        "eval/return_std",
        "eval/return_min",
        "eval/return_max",
        "eval/length_mean",
    }
    assert (tmp_path / "model" / "config.json").is_file()


def test_resume_is_bitwise_identical_with_env_and_normalisation_state(tmp_path):
    reference = _build([*PENDULUM, f"run_dir={tmp_path / 'ref'}"])
    reference.trainer.fit()

    run = [*PENDULUM, f"run_dir={tmp_path / 'cut'}"]
    first = _build(run)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 2 and d.trainer.request_stop("test"))
    first.trainer.fit()
    assert first.trainer.step == 2
    second = _build([*run, "resume_from=auto"])
    second.trainer.fit()

    for k, v in reference.model.state_dict().items():
        assert torch.equal(v, second.model.state_dict()[k]), k
    assert bool(second.model.obs_normalized)  # the observation statistics reached the model
    ref_rows, cut_rows = _metrics(tmp_path / "ref"), _metrics(tmp_path / "cut")
    keys = ("loss", "approx_kl", "return_mean", "episode_return", "explained_variance", "global_step")
    for a, b in zip(ref_rows[2:], cut_rows[2:], strict=True):
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    assert ref_rows[-1]["episodes"] == cut_rows[-1]["episodes"] > 0


def test_truncation_bootstrapping_changes_the_targets(tmp_path):
    values = {}
    for flag in ("true", "false"):
        parts = _build(
            [
                *PENDULUM,
                "trainer.max_steps=2",
                f"trainer.bootstrap_truncated={flag}",
                f"run_dir={tmp_path / flag}",
            ]
        )
        parts.trainer.fit()
        buf = parts.trainer.buffer
        values[flag] = (buf.data["truncated"].clone(), buf.returns.clone())
    truncated, with_bootstrap = values["true"]
    assert truncated.sum() == 2  # both copies hit the 200-step limit in the second rollout
    assert values["false"][0].sum() == 0
    assert not torch.equal(with_bootstrap, values["false"][1])


def test_config_errors_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="does not divide"):
        _build([*CARTPOLE, "trainer.num_minibatches=5", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="needs an environment"):
        _build(
            [
                "experiment=classify_blobs",
                "trainer=ppo_env",
                "objective=ppo_actor_critic",
                "~trainer.batch_size",
                "eval=none",
                f"run_dir={tmp_path}",
            ]
        )
