"""Any Hugging Face causal LM: Llama-, Qwen2-, Qwen3-, GPT-2- and Gemma-style models (random
weights, head size 32) train through the supervised, preference (DPO) and GRPO trainers (GRPO
generating through the torch engine), resume bitwise, save a model that transformers reloads, serve
it through the torch engine behind the OpenAI-compatible server (greedy = HF generate, concurrent
requests) and evaluate. The lean training forward covers the Llama layout; the others train
through their own forward."""

from __future__ import annotations

import asyncio

import pytest
import torch

from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.serving.openai.app import build_app, build_engine

torch.set_num_threads(1)

ARCHITECTURES = ["llama", "qwen2", "qwen3", "gpt2", "gemma"]
#: the families the lean training forward computes; the others fall back to the model's forward
LEAN = {"llama", "qwen2", "qwen3"}

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
        "model=hf_causal_lm",
        f"model.architecture={architecture}",
        "model.hidden_size=64",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.intermediate_size=96",
        *TRAINERS[trainer],
        *(["engine=torch"] if trainer == "grpo" else []),
        "trainer.max_steps=4",
        "trainer.save_every=2",
        "trainer.eval_every=0",
        f"run_dir={run_dir}",
    ]


PROMPTS = ["12+34=", "7+8=", "1+1="]


async def _complete(app, prompts, max_tokens):
    """Greedy completions of ``prompts`` requested at once through the server's /v1/completions."""
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:

        async def one(prompt):
            body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
            response = await http.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]

        return await asyncio.gather(*(one(p) for p in prompts))


def _build(overrides):
    return ExperimentBuilder.from_config(load_config(overrides)).build()


def _weights(parts):
    return {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_trains_and_resumes_bitwise(tiny_overrides, tmp_path, architecture, trainer):
    from toolbox.nn.llama_training import training_forward

    full = _build(_overrides(tiny_overrides, architecture, trainer, tmp_path / "full"))
    assert type(full.model).__name__.lower().startswith(architecture)
    assert (training_forward(full.model) is not None) == (architecture in LEAN)
    if trainer == "grpo":
        assert type(full.trainer.engine).__name__ == "TorchEngine"
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

    # `toolbox serve model=<run>/model` with the torch engine: the same engine behind the same app
    engine = build_engine(str(run_dir / "model"), "torch", {"device": "cpu"})
    assert type(engine).__name__ == "TorchEngine"
    try:
        texts = asyncio.run(_complete(build_app(engine, "m"), PROMPTS, max_tokens=6))
    finally:
        engine.shutdown()
    for prompt, text in zip(PROMPTS, texts, strict=True):
        ids = parts.tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            ref = saved.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        assert text == parts.tokenizer.decode(ref[0, ids.shape[1] :], skip_special_tokens=True), prompt

    evaluated = evaluate_model(OmegaConf.load(run_dir / "config.yaml"), run_dir / "model")
    assert evaluated == pytest.approx({k: v for k, v in metrics.items() if k in evaluated}, rel=1e-5)
    assert any("loss" in k for k in evaluated)
