"""QLoRA for real, on the CPU (bitsandbytes >= 0.48 has CPU 4-bit and 8-bit layers): the base loads
quantized, only the adapter trains, resume is bitwise, the export is the dequantized base plus the
update (it computes what the adapted model computed) and the torch engine serves it; DPO and GRPO
train on a quantized base with the adapters-disabled reference."""

from __future__ import annotations

import pytest
import torch
from test_adapters import GRPO

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.core.registries import ENGINES
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.nn.adapters import is_quantized, merged_copy
from toolbox.serving.engine import SamplingParams

pytest.importorskip("bitsandbytes")
torch.set_num_threads(1)

QLORA = ["peft=qlora", "peft.r=4", "trainer.max_steps=4", "trainer.save_every=2", "trainer.eval_every=0"]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


@pytest.fixture
def base_dir(tiny, tmp_path):
    """A tiny Llama (hidden 64: bitsandbytes quantizes in blocks of 64) trained 2 steps and saved,
    with the tiny overrides it was built from."""
    root = tmp_path / "qlora_base"
    parts = _build(
        [*tiny, "callbacks=default", "~callbacks.console", "trainer.max_steps=2", f"run_dir={root}"]
    )
    parts.trainer.fit()
    return root / "model", tiny


def _quantized(base, tmp_path, name, *extra, bits="4bit", batch=True):
    base_dir, tiny = base
    run = [
        o for o in tiny if not o.startswith("model.") and (batch or not o.startswith("trainer.batch_size"))
    ]
    return [
        *run,
        "model=pretrained",
        f"model.path={base_dir}",
        f"model.quantization={bits}",
        "tokenizer=pretrained",
        f"tokenizer.path={base_dir}",
        *QLORA,
        f"peft.quantize={bits}",
        f"run_dir={tmp_path / name}",
        *extra,
    ]


def test_qlora_sft_trains_resumes_bitwise_exports_and_serves(base_dir, tmp_path):
    full = _build(_quantized(base_dir, tmp_path, "full", "callbacks=default", "~callbacks.console"))
    assert is_quantized(full.model)
    before = {k: v.detach().clone() for k, v in full.model.state_dict().items()}
    full.trainer.fit()
    after = full.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # the 4-bit base never moved

    cut = _quantized(base_dir, tmp_path, "cut")
    first = _build(cut)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 2 and d.trainer.request_stop("test"))
    first.trainer.fit()
    second = _build([*cut, "resume_from=auto"])
    second.trainer.fit()
    for k, v in full.model.state_dict().items():
        if "lora_" in k:
            assert torch.equal(v, second.model.state_dict()[k]), k

    # the export: float32 weights, no quantization left, the same function as the adapted model
    exported = tmp_path / "full" / "model"
    assert (tmp_path / "full" / "adapter" / "adapter_config.json").is_file()
    assert "quantization_config" not in (exported / "config.json").read_text()
    ids = torch.tensor([[5, 9, 12, 7, 3, 11]])
    plain = merged_copy(full.model)
    with torch.no_grad():
        full.model.eval()
        torch.testing.assert_close(plain(ids).logits, full.model(ids).logits, rtol=0, atol=1e-4)
    engine = ENGINES.build({"name": "torch", "path": str(exported)})
    try:
        for k, v in engine.model.state_dict().items():
            torch.testing.assert_close(v, plain.state_dict()[k], rtol=0, atol=0)
        out = engine.generate(["12+3"], SamplingParams(max_tokens=4, temperature=0.0))[0]
        assert len(out.completions[0].token_ids) >= 1
    finally:
        engine.shutdown()


def test_qlora_dpo_on_an_8bit_base_starts_at_log_2(base_dir, tmp_path):
    """The reference is the quantized policy with its adapters disabled: step 1's loss is log 2."""
    overrides = _quantized(
        base_dir,
        tmp_path,
        "dpo",
        "trainer=preference",
        "objective=dpo",
        "data=arithmetic_pairs",
        "data.source.num_train=64",
        "data.source.num_test=16",
        "trainer.batch_size=8",
        "trainer.max_steps=2",
        "eval=none",
        bits="8bit",
    )
    parts = _build(overrides)
    losses = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: losses.append(d.metrics["loss"]))
    parts.trainer.fit()
    assert losses[0] == pytest.approx(torch.log(torch.tensor(2.0)).item(), abs=1e-5)


def test_qlora_grpo_engine_follows_the_dequantized_merge(base_dir, tmp_path):
    overrides = _quantized(
        base_dir,
        tmp_path,
        "grpo",
        *GRPO,
        "trainer.max_steps=1",
        batch=False,
    )
    parts = _build(overrides)
    try:
        parts.trainer.train_step()
        merged = merged_copy(parts.model).state_dict()
        for k, v in parts.engine.model.state_dict().items():
            torch.testing.assert_close(v, merged[k], rtol=0, atol=1e-6)
    finally:
        parts.engine.shutdown()


def test_qlora_without_bitsandbytes_names_the_package(tiny_overrides, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    with pytest.raises(ConfigError, match="QLoRA.*needs the bitsandbytes package"):
        _build([*tiny_overrides, "peft=qlora"])
