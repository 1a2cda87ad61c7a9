"""Any Hugging Face causal LM: Qwen2-, Qwen3-, GPT-2- and Gemma-style models (random weights, head
size 32) train through the supervised, preference (DPO) and GRPO trainers, resume bitwise, save a
model that transformers reloads, generate through an engine (greedy = HF generate) and evaluate."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.events import Event
from toolbox.core.registries import ENGINES
from toolbox.experiment import ExperimentBuilder, load_config

torch.set_num_threads(1)

ARCHITECTURES = ["qwen2", "qwen3", "gpt2", "gemma"]
#: the torch engine runs the Llama layout (llama, mistral, qwen2, qwen3); the others serve through hf
ENGINE = {"qwen2": "torch", "qwen3": "torch", "gpt2": "hf", "gemma": "hf"}

TRAINERS = {
    "sft": [],
    "dpo": ["data=arithmetic_pairs", "trainer=preference", "objective=dpo", "data.source.num_train=64"],
    "grpo": [
        "trainer=grpo",
        "objective=grpo",
        "data.dataset.name=prompt_only",
        "data.dataset.max_length=16",
        "eval=none",
        "trainer.prompts_per_step=2",
        "trainer.num_generations=2",
        "trainer.max_completion_length=3",
        "trainer.temperature=2.0",
        # a dense reward for a random model: the completion starts with a digit
        "~trainer.rewards.correct",
        "+trainer.rewards.digit={name: format_regex, pattern: '[0-9].*', weight: 1.0}",
    ],
}


def _overrides(tiny_overrides, architecture, trainer, run_dir):
    base = [o for o in tiny_overrides if not o.startswith(("run_dir", "model."))]
    if trainer == "grpo":
        base = [o for o in base if not o.startswith("trainer.batch_size")]
    return [
        *base,
        "model=causal_lm",
        f"model.architecture={architecture}",
        "model.hidden_size=64",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.intermediate_size=96",
        *TRAINERS[trainer],
        *([f"engine={ENGINE[architecture]}"] if trainer == "grpo" else []),
        "trainer.max_steps=4",
        "trainer.save_every=2",
        "trainer.eval_every=0",
        f"run_dir={run_dir}",
    ]


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _weights(parts):
    return {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_trains_and_resumes_bitwise(tiny_overrides, tmp_path, architecture, trainer):
    full = _build(_overrides(tiny_overrides, architecture, trainer, tmp_path / "full"))
    assert type(full.model).__name__.lower().startswith(architecture)
    before = _weights(full)
    losses = []
    full.trainer.bus.subscribe(Event.STEP_END, lambda d: losses.append(d.metrics["loss"]))
    full.trainer.fit()
    after = _weights(full)
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it trained

    run = _overrides(tiny_overrides, architecture, trainer, tmp_path / "cut")
    first = _build(run)
    first.trainer.bus.subscribe(Event.STEP_END, lambda d: d.step == 2 and d.trainer.request_stop("test"))
    first.trainer.fit()
    second = _build([*run, "resume_from=auto"])
    second.trainer.fit()
    resumed = _weights(second)
    assert all(torch.equal(resumed[k], after[k]) for k in after)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_saves_serves_and_evaluates(tiny_overrides, tmp_path, architecture):
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM

    from toolbox.eval.run import evaluate_model

    run_dir = tmp_path / "run"
    parts = _build(
        [
            *_overrides(tiny_overrides, architecture, "sft", run_dir),
            "eval=lm",
            "callbacks=default",
            "~callbacks.console",
        ]
    )
    metrics = parts.trainer.fit()
    assert "eval/loss" in metrics or any(k.endswith("loss") for k in metrics)
    saved = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    assert type(saved) is type(parts.model)
    for k, v in parts.model.state_dict().items():
        assert torch.equal(saved.state_dict()[k], v), k

    engine = ENGINES.build({"name": ENGINE[architecture]}, model=saved, tokenizer=parts.tokenizer)
    try:
        from toolbox.serving.engine import SamplingParams

        prompt = "12+34="
        out = engine.generate([prompt], SamplingParams(max_tokens=6, temperature=0.0))[0]
        ids = parts.tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            ref = saved.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        expected = ref[0, ids.shape[1] :].tolist()
        got = out.completions[0].token_ids
        assert got == expected[: len(got)] and len(got) >= 1
    finally:
        engine.shutdown()

    evaluated = evaluate_model(OmegaConf.load(run_dir / "config.yaml"), run_dir / "model")
    assert evaluated == pytest.approx({k: v for k, v in metrics.items() if k in evaluated}, rel=1e-5)
    assert any("loss" in k for k in evaluated)
