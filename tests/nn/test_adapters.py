"""LoRA/DoRA through peft: only the adapter trains and is checkpointed, resume is bitwise, the
preference reference is the policy with adapters disabled (no copy), GRPO's engine follows the
merged weights, the exported adapter and merged model load and serve (QLoRA: test_qlora.py)."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.checkpointer import Checkpointer
from toolbox.core.errors import ConfigError
from toolbox.core.events import Event
from toolbox.core.registries import ENGINES
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.nn.adapters import AdapterDisabledReference, count_parameters, is_adapted, merged_state_dict

torch.set_num_threads(1)

GRPO = [
    "trainer=grpo",
    "objective=grpo",
    "data.dataset.name=prompt_only",
    "data.dataset.max_length=16",
    "eval=none",
    "trainer.prompts_per_step=2",
    "trainer.num_generations=2",
    "trainer.max_completion_length=3",
]
PEFT = ["peft=lora", "peft.r=4", "trainer.max_steps=6", "trainer.save_every=3", "trainer.eval_every=0"]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _weights(parts):
    return {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


def test_lora_sft_trains_only_the_adapter_and_resumes_bitwise(tiny_overrides, tmp_path, capsys):
    run = [o for o in tiny_overrides if not o.startswith("run_dir")]
    full = _build([*run, *PEFT, "callbacks=default", "~callbacks.console", f"run_dir={tmp_path / 'full'}"])
    printed = capsys.readouterr().out
    trainable, total = count_parameters(full.model)
    assert f"{trainable:,} trainable of {total:,} parameters" in printed
    assert 0 < trainable < total / 2
    before = _weights(full)
    full.trainer.fit()
    after = _weights(full)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # the base never moved

    saved = Checkpointer(tmp_path / "full").load_latest()[1]["model"]
    assert saved and all("lora_" in k for k in saved)  # checkpoints hold only the adapter

    cut = [*run, *PEFT, f"run_dir={tmp_path / 'cut'}"]
    first = _build(cut)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 3 and d.trainer.request_stop("test"))
    first.trainer.fit()
    second = _build([*cut, "resume_from=auto"])
    second.trainer.fit()
    resumed = _weights(second)
    assert all(torch.equal(resumed[k], after[k]) for k in after)

    # the export: <run>/adapter in peft's format, <run>/model the merged model
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "full" / "model")
    expected = merged_state_dict(full.model)
    for k, v in merged.state_dict().items():
        torch.testing.assert_close(v, expected[k], rtol=0, atol=1e-6)
    base = _build([*run, "trainer.max_steps=1", f"run_dir={tmp_path / 'base'}"]).model  # same seed: same base
    adapted = PeftModel.from_pretrained(base, tmp_path / "full" / "adapter")
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    torch.testing.assert_close(
        adapted(input_ids=ids).logits, merged(input_ids=ids).logits, rtol=1e-5, atol=1e-5
    )


def test_lora_dpo_reference_is_the_policy_with_adapters_disabled(tiny_overrides, tmp_path):
    run = [
        *tiny_overrides,
        "data=arithmetic_pairs",
        "trainer=preference",
        "objective=dpo",
        "data.source.num_train=64",
        *PEFT,
    ]
    parts = _build(run)
    assert isinstance(parts.reference_model, AdapterDisabledReference)
    assert list(parts.reference_model.parameters()) == []  # no second copy of the weights
    from toolbox.objectives.logprobs import completion_logps

    with torch.no_grad():  # a random adapter: the lean reference (adapters off) = the model's, ≠ the policy
        for name, p in parts.model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.1)
    batch = parts.trainer.to_device(parts.trainer.loader.next_batch())
    lean, plain = (
        completion_logps(parts.trainer._reference_forward, batch),
        completion_logps(parts.reference_model, batch),
    )
    torch.testing.assert_close(lean[0], plain[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(completion_logps(parts.model, batch)[0], plain[0])
    parts = _build(run)
    losses = []
    parts.trainer.bus.subscribe(Event.STEP_END, lambda d: losses.append(d.metrics["loss"]))
    parts.trainer.fit()
    # LoRA's B starts at zero: at step 1 policy == reference, so the DPO loss is log 2
    assert losses[0] == pytest.approx(0.6931471805599453, abs=1e-6)
    assert losses[-1] < losses[0]


def test_dora_trains(tiny_overrides, tmp_path):
    parts = _build([*tiny_overrides, "peft=dora", "trainer.max_steps=2"])
    assert parts.model.peft_config["default"].use_dora
    before = _weights(parts)
    parts.trainer.fit()
    assert any(not torch.equal(before[k], v) for k, v in _weights(parts).items())


def test_grpo_engine_generates_with_the_merged_weights(tiny_overrides, tmp_path):
    run = [o for o in tiny_overrides if not o.startswith("trainer.batch_size")]
    parts = _build([*run, *GRPO, *PEFT, "trainer.max_steps=2"])
    assert is_adapted(parts.model) and not is_adapted(parts.engine.model)
    parts.trainer.bus.subscribe(Event.FIT_END, lambda d: None)
    engine_model = parts.engine.model
    parts.trainer.train_step()
    merged = merged_state_dict(parts.model)
    for k, v in engine_model.state_dict().items():
        torch.testing.assert_close(v, merged[k], rtol=0, atol=1e-6)
    parts.engine.shutdown()


def test_an_adapter_folder_serves_as_base_plus_adapter(tiny_overrides, tmp_path):
    """merge_on_export=false: <run>/model holds only the adapter over a saved base; engines load it."""
    run = [o for o in tiny_overrides if not o.startswith("run_dir")]
    base = _build(
        [
            *run,
            "callbacks=default",
            "~callbacks.console",
            "trainer.max_steps=2",
            f"run_dir={tmp_path / 'base'}",
        ]
    )
    base.trainer.fit()
    base_dir = tmp_path / "base" / "model"
    tuned = _build(
        [
            *[o for o in run if not o.startswith("model.")],
            "model=pretrained",
            f"model.path={base_dir}",
            "tokenizer=pretrained",
            f"tokenizer.path={base_dir}",
            *PEFT,
            "peft.merge_on_export=false",
            "callbacks=default",
            "~callbacks.console",
            f"run_dir={tmp_path / 'tuned'}",
        ]
    )
    tuned.trainer.fit()
    folder = tmp_path / "tuned" / "model"
    assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
    engine = ENGINES.build({"name": "torch", "path": str(folder)})
    try:
        from toolbox.serving.engine import SamplingParams

        expected = merged_state_dict(tuned.model)
        for k, v in engine.model.state_dict().items():
            torch.testing.assert_close(v, expected[k], rtol=0, atol=1e-6)
        out = engine.generate(["12+3"], SamplingParams(max_tokens=4, temperature=0.0))[0]
        assert len(out.completions[0].token_ids) >= 1
    finally:
        engine.shutdown()


def test_merge_on_export_false_needs_a_saved_base(tiny_overrides, tmp_path):
    parts = _build(
        [
            *tiny_overrides,
            *PEFT,
            "peft.merge_on_export=false",
            "trainer.max_steps=1",
            "callbacks=default",
            "~callbacks.console",
        ]
    )
    with pytest.raises(ConfigError, match="merge_on_export=true"):
        parts.trainer.fit()


def test_qlora_needs_a_quantized_base(tiny_overrides):
    """peft=qlora on a model built from config (not loaded quantized): the error names the fix."""
    pytest.importorskip("bitsandbytes")
    with pytest.raises(ConfigError, match="model.quantization=4bit"):
        _build([*tiny_overrides, "peft=qlora"])


def test_bad_settings(tiny_overrides):
    with pytest.raises(ConfigError, match="peft.r"):
        _build([*tiny_overrides, "peft=lora", "peft.r=0"])
    with pytest.raises(ConfigError, match="target_modules"):
        _build([*tiny_overrides, "peft=lora", "peft.target_modules=[nope_proj]"])
