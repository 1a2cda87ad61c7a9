"""benchmarks/harness: alternating rounds, ratios from unrounded values, the torch settings every
side runs under, the GEMM peak and MFU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from harness import Rounds, StepClock, TorchSettings, gemm_peak, mfu, model_flop_params, spread  # noqa: E402


@pytest.fixture
def restore_torch():
    before = TorchSettings.live()
    yield
    before.apply()


def test_rounds_alternate_and_ratios_use_unrounded_values(restore_torch):
    settings = TorchSettings(threads=1)
    rates = {"ours": iter([3.004, 3.006, 3.0]), "peer": iter([1.5, 1.4, 1.6])}
    calls: list[str] = []

    def side(name):
        def run():
            calls.append(name)
            return {"steps_per_s": next(rates[name]), "sec_per_step": 1 / 2}

        return run

    rounds = Rounds({"ours": side("ours"), "peer": side("peer")}, settings, 3).run()
    assert rounds.orders == [["ours", "peer"], ["peer", "ours"], ["ours", "peer"]]
    assert calls == ["ours", "peer", "peer", "ours", "ours", "peer"]
    r = rounds.ratio("ours", "peer", "steps_per_s")
    assert r["each"] == [3.004 / 1.5, 3.006 / 1.4, 3.0 / 1.6]  # unrounded
    assert r["median"] == 3.004 / 1.5 and r["min"] == 3.0 / 1.6 and r["max"] == 3.006 / 1.4
    assert r["of_medians"] == 3.004 / 1.5
    assert rounds.ratio("ours", "peer", "sec_per_step", higher_is_better=False)["median"] == 1.0
    summary = rounds.summary()
    assert summary["peer"]["steps_per_s"] == {"each": [1.5, 1.4, 1.6], "min": 1.4, "median": 1.5, "max": 1.6}


def test_a_side_that_changes_the_settings_fails(restore_torch):
    def greedy():
        torch.set_num_threads(2)
        return {"x": 1.0}

    with pytest.raises(RuntimeError, match="changed the process-wide torch settings.*threads"):
        Rounds({"ours": lambda: {"x": 1.0}, "greedy": greedy}, TorchSettings(threads=1), 1).run()


def test_settings_apply_the_fill_and_determinism(restore_torch):
    TorchSettings(threads=1, deterministic=True, fill_uninitialized_memory=True).apply()
    assert torch.isnan(torch.empty(64, 64)).all()
    s = TorchSettings(threads=1, deterministic=True, fill_uninitialized_memory=False)
    s.apply()
    assert TorchSettings.live() == s
    assert s.overrides() == ["deterministic=true", "num_threads=1"]


def test_step_clock_skips_the_warmup():
    clock = StepClock(warmup=2)
    for _ in range(5):
        clock.step_done()
    assert clock.timed_steps == 3
    figures = clock.figures({"tokens": 100.0})
    assert figures["tokens_per_s"] == pytest.approx(100.0 / figures["sec_per_step"])
    with pytest.raises(RuntimeError, match="raise --steps"):
        StepClock(warmup=5).figures()


def test_gemm_peak_and_mfu():
    peak = gemm_peak(size=128, seconds=0.05)
    assert peak["flop_per_s"] > 1e6 and peak["calls"] >= 3
    # 6 x 1M params x 1000 tokens in 1 s against 12 GFLOP/s is half the peak
    assert mfu(10**6, 1000, 1.0, 12e9) == pytest.approx(0.5)
    assert spread([3.0, 1.0, 2.0])["median"] == 2.0


def test_flop_params_leave_out_an_untied_input_embedding():
    from transformers import LlamaConfig, LlamaForCausalLM

    def llama(tied: bool):
        cfg = LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            tie_word_embeddings=tied,
        )
        return LlamaForCausalLM(cfg)

    untied, tied = llama(False), llama(True)
    total = sum(p.numel() for p in untied.parameters())
    assert model_flop_params(untied) == total - 100 * 32
    assert model_flop_params(tied) == sum(p.numel() for p in tied.parameters())
