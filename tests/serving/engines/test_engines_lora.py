"""Serving a LoRA adapter (a peft folder over a saved base): the torch and hf engines load base +
adapter (merged), vLLM gets the adapter as a LoRA request; greedy completions agree."""

from __future__ import annotations

import copy
import json
import textwrap

import torch

from toolbox.core.registries import ENGINES
from toolbox.nn.adapters import LoRA
from toolbox.serving.engine import SamplingParams

PROMPTS = ["12+34=", "hello world", "the quick brown fox 99"]


def _adapter(model, model_dir, out):
    """A LoRA adapter over ``model_dir`` with a random (non-zero) update, saved in peft's format."""
    adapted = LoRA(r=8, alpha=16.0).apply(copy.deepcopy(model))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    adapted.peft_config["default"].base_model_name_or_path = str(model_dir)
    adapted.save_pretrained(out)
    return adapted


def _ids(outs):
    return [o.completions[0].token_ids for o in outs]


def test_torch_and_hf_engines_serve_base_plus_adapter(tmp_path, model, model_dir, tokenizer):
    adapted = _adapter(model, model_dir, tmp_path / "adapter")
    tokenizer.save_pretrained(tmp_path / "adapter")
    merged = copy.deepcopy(adapted).merge_and_unload()
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    reference = ENGINES.build({"name": "torch"}, model=merged, tokenizer=tokenizer)
    plain = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    expected = _ids(reference.generate(PROMPTS, greedy))
    assert expected != _ids(plain.generate(PROMPTS, greedy))  # the adapter changes the completions
    for name in ("torch", "hf"):
        engine = ENGINES.build({"name": name, "path": str(tmp_path / "adapter")})
        assert _ids(engine.generate(PROMPTS, greedy)) == expected, name
        engine.shutdown()
    reference.shutdown()
    plain.shutdown()


VLLM_LORA = textwrap.dedent(
    """
    import json, sys
    from toolbox.core.registries import ENGINES
    from toolbox.serving.engine import SamplingParams

    def main():
        engine = ENGINES.build({"name": "vllm", "path": sys.argv[1], "max_model_len": 256})
        outs = engine.generate(json.loads(sys.argv[2]), SamplingParams(max_tokens=16, temperature=0))
        print("RESULT " + json.dumps([o.completions[0].token_ids for o in outs]))
        engine.shutdown()

    if __name__ == "__main__":
        main()
    """
)


def test_vllm_engine_serves_the_adapter_as_a_lora_request(
    tmp_path, run_in_vllm_env, model, model_dir, tokenizer
):
    adapted = _adapter(model, model_dir, tmp_path / "adapter")
    tokenizer.save_pretrained(tmp_path / "adapter")
    merged = copy.deepcopy(adapted).merge_and_unload()
    ours = ENGINES.build({"name": "torch"}, model=merged, tokenizer=tokenizer)
    expected = _ids(ours.generate(PROMPTS, SamplingParams(max_tokens=16, temperature=0.0)))
    ours.shutdown()
    script = tmp_path / "run.py"
    script.write_text(VLLM_LORA)
    proc = run_in_vllm_env(script, str(tmp_path / "adapter"), json.dumps(PROMPTS))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    assert json.loads(lines[-1][len("RESULT ") :]) == expected
