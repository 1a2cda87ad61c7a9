"""OpenAI's presence/frequency penalties and logit_bias in the shared sampler, and constrained
decoding: the formula against a direct computation, and the torch and hf engines agreeing."""

from __future__ import annotations

import json
import string

import jsonschema
import pytest
import torch

from toolbox.serving.engine import SamplingParams, StructuredOutput
from toolbox.serving.sampling import SamplingTensors, check_params, process_logits


def test_output_penalties_and_logit_bias_follow_openais_formula():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 10, generator=g)
    params = [
        SamplingParams(
            temperature=0, presence_penalty=0.5, frequency_penalty=0.25, logit_bias={1: 3.0, 7: -100.0}
        ),
        SamplingParams(temperature=0, presence_penalty=-2.0),
        SamplingParams(temperature=0),
    ]
    outputs = [[1, 1, 4], [2], [5, 5]]
    got = process_logits(logits, SamplingTensors.from_params(params), outputs=outputs)
    want = logits.clone()
    for i, (p, out) in enumerate(zip(params, outputs, strict=True)):
        for t, b in p.logit_bias.items():  # bias first (vLLM's order), then the penalties
            want[i, t] += b
        for t in set(out):  # OpenAI: mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence
            want[i, t] -= out.count(t) * p.frequency_penalty + p.presence_penalty
    torch.testing.assert_close(got, want)


def test_logit_bias_of_many_rows_is_each_rows_addition_bit_for_bit():
    """The biases of every row go in as one flattened index_put: the same float additions as adding
    each row's biases to its logits in turn (rows without a bias, and a batch without any, untouched)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 50, generator=g)
    biases = [{3: 2.5}, {}, {3: -1.25, 49: 7.0, 0: -100.0}, {}, {17: 0.1}, {3: 2.5}]
    params = [SamplingParams(temperature=1.0, logit_bias=b) for b in biases]
    got = process_logits(logits, SamplingTensors.from_params(params))
    want = logits.clone()
    for row, bias in enumerate(biases):
        for token, value in bias.items():
            want[row, token] += value
    assert torch.equal(got, want)
    plain = [SamplingParams(temperature=1.0)] * 2
    assert SamplingTensors.from_params(plain).logit_bias is None
    assert torch.equal(process_logits(logits[:2], SamplingTensors.from_params(plain)), logits[:2])


@pytest.mark.parametrize(
    ("params", "word"),
    [
        (SamplingParams(presence_penalty=2.5), "presence_penalty"),
        (SamplingParams(frequency_penalty=float("nan")), "frequency_penalty"),
        (SamplingParams(logit_bias={3: 101.0}), "logit_bias"),
        (SamplingParams(logit_bias={10: 1.0}), "logit_bias"),
    ],
)
def test_out_of_range_is_refused(params, word):
    with pytest.raises(ValueError, match=word):
        check_params([params], vocab_size=10)


@pytest.fixture(scope="module")
def ascii_pair():
    from toolbox.core.registries import MODELS, TOKENIZERS

    tok = TOKENIZERS.build({"name": "char"}, corpus=[string.printable])
    torch.manual_seed(0)
    model = MODELS.build(
        {"name": "tiny_llama"},
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    ).eval()
    return model, tok


def test_torch_and_hf_engines_honour_penalties_bias_and_schemas_alike(ascii_pair):
    from toolbox.core.registries import ENGINES

    model, tok = ascii_pair
    hf = ENGINES.build({"name": "hf"}, model=model, tokenizer=tok)
    te = ENGINES.build({"name": "torch", "linear": "torch"}, model=model, tokenizer=tok)
    a = tok.convert_tokens_to_ids("a")
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"enum": ["x", "y"]}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    try:
        plain = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
        base = te.generate(["hi"], plain)[0].completions[0].text
        for kw in (
            {"logit_bias": {a: 3.0}, "frequency_penalty": 1.5},
            {"logit_bias": {a: 3.0}, "presence_penalty": 2.0},
            {"frequency_penalty": 2.0},
            {"structured": StructuredOutput(json_schema=schema), "ignore_eos": False, "max_tokens": 40},
        ):
            p = SamplingParams(**{**plain.__dict__, **kw})
            ours = te.generate(["hi"], p)[0].completions[0]
            theirs = hf.generate(["hi"], p)[0].completions[0]
            assert ours.text == theirs.text and ours.text != base, (kw, ours.text, theirs.text)
        jsonschema.validate(json.loads(ours.text), schema)
        assert ours.finish_reason == theirs.finish_reason == "stop"
    finally:
        te.shutdown()
