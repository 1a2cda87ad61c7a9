"""serving.sampling: each processor against transformers' own, greedy = argmax, seeded draws."""

from __future__ import annotations

import pytest
import torch

from toolbox.serving.engine import SamplingParams
from toolbox.serving.sampling import (
    SamplingTensors,
    apply_min_p,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
    check_params,
    make_generator,
    process_logits,
    sample,
    token_logprobs,
)


def _tensors(*params: SamplingParams) -> SamplingTensors:
    return SamplingTensors.from_params(list(params))


@pytest.fixture
def logits():
    return torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3


def test_temperature_zero_is_argmax_even_beside_sampled_rows(logits):
    t = _tensors(*(SamplingParams(temperature=0.0 if i % 2 == 0 else 1.3, top_k=5) for i in range(6)))
    tokens = sample(process_logits(logits, t), t, [make_generator(i) for i in range(6)])
    assert tokens[0::2].tolist() == logits.argmax(-1)[0::2].tolist()


@pytest.mark.parametrize("k", [1, 3, 17])
def test_top_k_matches_transformers(logits, k):
    from transformers.generation.logits_process import TopKLogitsWarper

    ours = apply_top_k(logits, torch.full((6,), k))
    ref = TopKLogitsWarper(top_k=k)(None, logits.clone())
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref))
    assert (torch.isfinite(ours).sum(-1) == k).all()


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_matches_transformers(logits, p):
    from transformers.generation.logits_process import TopPLogitsWarper

    ours = apply_top_p(logits, torch.full((6,), p))
    ref = TopPLogitsWarper(top_p=p)(None, logits.clone())
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref))


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = lambda p: torch.isfinite(apply_top_p(probs.log(), torch.tensor([p]))).sum().item()  # noqa: E731
    assert [kept(0.4), kept(0.75), kept(0.85), kept(0.97), kept(1.0)] == [1, 2, 3, 4, 4]


@pytest.mark.parametrize("m", [0.01, 0.2, 0.9])
def test_min_p_matches_transformers(logits, m):
    from transformers.generation.logits_process import MinPLogitsWarper

    ours = apply_min_p(logits, torch.full((6,), m))
    ref = MinPLogitsWarper(min_p=m)(None, logits.clone())
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref))


def test_repetition_penalty_matches_transformers(logits):
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    history = torch.randint(0, 50, (6, 12), generator=torch.Generator().manual_seed(1))
    ours = apply_repetition_penalty(logits, history.tolist(), torch.full((6,), 1.7))
    ref = RepetitionPenaltyLogitsProcessor(penalty=1.7)(history, logits.clone())
    torch.testing.assert_close(ours, ref)


def test_a_top_k_past_any_vocabulary_keeps_every_token_beside_other_rows(logits):
    """schemathesis found it: ``top_k: 2**64`` (schema-valid: ``>= -1``) overflowed a long while
    the batch's tensors were built, failing the engine step of every request in it (500s)."""
    t = _tensors(SamplingParams(top_k=2**64), SamplingParams(top_k=2), *[SamplingParams()] * 4)
    out = process_logits(logits, t)
    assert torch.isfinite(out[0]).all()  # as top_k=0: every token kept
    assert torch.isfinite(out[1]).sum() == 2  # the row beside it keeps its own top_k


def test_rows_keep_their_own_parameters(logits):
    t = _tensors(
        SamplingParams(top_k=2), SamplingParams(top_p=0.5), SamplingParams(min_p=0.5), *[SamplingParams()] * 3
    )
    out = process_logits(logits, t)
    assert torch.isfinite(out[0]).sum() == 2
    assert torch.equal(
        torch.isfinite(out[1]), torch.isfinite(apply_top_p(logits[1:2], torch.tensor([0.5])))[0]
    )
    assert torch.isfinite(out[3:]).all()


def test_seeded_rows_do_not_depend_on_the_rest_of_the_batch(logits):
    one = _tensors(SamplingParams(seed=7))
    alone = sample(process_logits(logits[:1], one), one, [make_generator(7)]).item()
    batch = _tensors(SamplingParams(seed=7), *[SamplingParams()] * 5)
    generators = [make_generator(7)] + [None] * 5
    mixed = sample(process_logits(logits, batch), batch, generators, default_generator=make_generator(123))
    assert mixed[0].item() == alone


def test_a_seed_repeats_its_draws_and_another_seed_does_not(logits):
    t = _tensors(*[SamplingParams()] * 6)

    def draws(seed: int) -> list[list[int]]:
        g = make_generator(seed)
        return [sample(logits, t, [g] * 6).tolist() for _ in range(5)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    rows = 20000
    logits = probs.log().expand(rows, 4).contiguous()
    t = _tensors(*[SamplingParams(temperature=1.0)] * rows)
    tokens = sample(logits, t, default_generator=make_generator(0))
    freq = torch.bincount(tokens, minlength=4).float() / rows
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_temperature_sharpens(logits):
    t = _tensors(*[SamplingParams(temperature=0.05)] * 6)
    tokens = sample(process_logits(logits, t), t, default_generator=make_generator(0))
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_token_logprobs_are_log_softmax(logits):
    tokens = torch.tensor([0, 5, 9, 3, 2, 49])
    expected = torch.log_softmax(logits, -1)[torch.arange(6), tokens]
    torch.testing.assert_close(token_logprobs(logits, tokens), expected)


@pytest.mark.parametrize(
    "bad",
    [
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": -2},
        {"min_p": 1.5},
        {"repetition_penalty": 0},
        {"n": 0},
        {"max_tokens": 0},
    ],
)
def test_bad_parameters_are_rejected_by_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        check_params([SamplingParams(**bad)])


# incremental detokenization (engines.detokenize) ------------------------------------------------------
@pytest.fixture(scope="module")
def bpe():
    from toolbox.core.registries import TOKENIZERS

    return TOKENIZERS.build(
        {"name": "bpe", "vocab_size": 300}, corpus=["hello world, the quick brown fox"] * 5
    )


def test_incremental_text_equals_full_decode_with_multibyte_characters(bpe):
    from toolbox.serving.engines.detokenize import IncrementalText

    text = "héllo wörld ✓ the quick 🦊 fox"
    ids = bpe(text, add_special_tokens=False)["input_ids"]
    inc, pieces = IncrementalText(bpe), []
    for token in ids:
        inc.push(token)
        pieces.append(inc.take())
    inc.finish()
    pieces.append(inc.take(final=True))
    assert "".join(pieces) == inc.text == bpe.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)


def test_text_decoder_is_the_tokenizers_decode(bpe, tokenizer):
    """The streamed text's decode skips transformers' Python wrapper for a fast tokenizer: the same
    string as ``decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)`` on every
    window of ids, special tokens (bos, eos, pad, role markers) and multibyte pieces included; a
    tokenizer that overrides ``decode`` keeps its own."""
    from toolbox.serving.engines.detokenize import text_decoder

    for tok, text in ((bpe, "héllo wörld ✓ the quick 🦊 fox, hello"), (tokenizer, "1+2=3, ok!")):
        decode = text_decoder(tok)
        assert decode.__code__.co_freevars == ("backend",)  # the Rust tokenizer's own decode
        ids = [*tok.all_special_ids, *tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
        for i in range(len(ids)):
            for j in range(i, min(len(ids), i + 6) + 1):
                expect = tok.decode(ids[i:j], skip_special_tokens=True, clean_up_tokenization_spaces=False)
                assert decode(ids[i:j]) == expect, (i, j)
    wrapped = _Overriding(bpe)
    assert text_decoder(wrapped)([5, 6]) == "overridden"


class _Overriding:
    """A tokenizer whose ``decode`` is its own."""

    def __init__(self, tok):
        self._tokenizer = tok._tokenizer

    def decode(self, ids, **kwargs):
        return "overridden"


def test_stop_strings_are_held_back_then_cut(bpe):
    from toolbox.serving.engines.detokenize import IncrementalText

    ids = bpe("hello world, the quick brown fox", add_special_tokens=False)["input_ids"]
    inc, released = IncrementalText(bpe, stop=["the q", "zzz"]), ""
    stopped_at = None
    for k, token in enumerate(ids):
        if inc.push(token):
            stopped_at = k
            break
        released += inc.take()
        assert "hello world, ".startswith(released)  # nothing released that the stop string later cuts
    released += inc.take(final=True)
    assert stopped_at is not None and released == inc.text == "hello world, "


def test_select_equals_rebuilding_from_the_rows_params():
    """The scheduler's retire takes the survivors' rows of the batch's tensors: the same values and
    switches as from_params of their parameters (here the only top-k, greedy and logprobs rows go)."""
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7, top_k=5, logprobs=True, top_logprobs=3),
        SamplingParams(temperature=1.3, top_p=0.9, min_p=0.05, repetition_penalty=1.2),
        SamplingParams(temperature=1.0, presence_penalty=0.5, frequency_penalty=-0.25),
    ]
    rows = [3, 2]
    got = SamplingTensors.from_params(params).select(rows, [params[r] for r in rows])
    want = SamplingTensors.from_params([params[r] for r in rows])
    for name, value in vars(want).items():
        if torch.is_tensor(value):
            assert torch.equal(getattr(got, name), value), name
        else:
            assert getattr(got, name) == value, name
    assert (got.all_greedy, got.any_top_k, got.any_top_p, got.any_penalty, got.any_logprobs) == (
        False, False, True, True, False,
    )  # fmt: skip


def test_select_of_a_batch_with_logit_bias_rebuilds_it():
    params = [SamplingParams(logit_bias={3: 5.0}), SamplingParams(logit_bias={1: -2.0, 4: 1.0})]
    got = SamplingTensors.from_params(params).select([1], [params[1]])
    assert [t.tolist() for t in got.logit_bias] == [[0, 0], [1, 4], [-2.0, 1.0]]
