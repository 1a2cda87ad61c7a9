"""benchmarks/generation_profile.py: its stand-ins remove the work they name and leave the runner as it
was; its report splits each step into parts that add up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import generation_profile as profile  # noqa: E402
from generation import SIZES, build_model  # noqa: E402

from toolbox.core.registries import ENGINES, TOKENIZERS  # noqa: E402


def _runner():
    tokenizer = TOKENIZERS.build({"name": "char"}, corpus=["abcdefghij"])
    model = build_model(len(tokenizer), seed=0, **SIZES["tiny"])
    engine = ENGINES.build(
        {"name": "torch", "max_batch_size": 2, "max_model_len": 16}, model=model, tokenizer=tokenizer
    )
    return engine


def _step(runner, position: int = 4) -> torch.Tensor:
    runner.prefill([0, 1], [[5, 6, 7, 8], [9, 10, 11, 12]])
    return runner.decode(torch.tensor([3, 4]), torch.tensor([position, position]), position, position)


def test_the_stand_ins_skip_their_part_and_restore_the_runner():
    engine = _runner()
    runner = engine.runner
    try:
        with torch.inference_mode():
            full = _step(runner)
            with profile.stand_ins(runner, "no_attention"):
                without_attention = _step(runner)
            assert not torch.allclose(without_attention, full)
            calls = []
            real = runner._linear

            def counting(*args):
                calls.append(1)
                return real(*args)

            runner._linear = counting
            with profile.stand_ins(runner, "no_projections"):
                _step(runner)
                first = len(calls)
                _step(runner, position=5)  # the same shapes: no real matmul at all
                assert len(calls) == first
            runner._linear = real
            assert torch.equal(_step(runner), full)  # everything restored
    finally:
        engine.shutdown()


def test_the_report_splits_each_step_into_parts_that_add_up(capsys):
    report = profile.main(["--size", "tiny", "--batch-sizes", "1", "2", "--steps", "3", "--rounds", "1"])
    assert [r["batch_size"] for r in report["results"]] == [1, 2]
    for r in report["results"]:
        assert r["step_ms"] > 0 and r["hf_step_ms"] > 0
        parts = r["projections_ms"] + r["attention_ms"] + r["rest_ms"]
        assert abs(parts - r["step_ms"]) <= 0.002
        assert r["ratio"] == pytest.approx(r["hf_step_ms"] / r["step_ms"], rel=0.01)
    assert '"benchmark": "decode step profile' in capsys.readouterr().out
