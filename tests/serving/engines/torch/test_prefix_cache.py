"""Prefix caching in the torch engine: a conversation's next turn reuses the keys and values of the
previous turn's prompt and reply. Greedy tokens equal the full re-prefill path (the cache off), in
one-forward and chunked prefill, beside fresh prompts in the same step and with n > 1; the hits are
counted; new weights empty the cache; the budget bounds it; sampling stays deterministic."""

from __future__ import annotations

import pytest
import torch

from toolbox.serving.engine import SamplingParams
from toolbox.serving.engines.torch.prefix_cache import PrefixCache

OPENINGS = ["12+34=", "hello world", "the quick brown fox", "a"]
ANSWERS = [" and then?", " go on, 7+8=", " more!", " x"]


@pytest.fixture
def engine_for(engine_for, long_model, tokenizer):
    return lambda **spec: engine_for(long_model, tokenizer, **spec)


def greedy(max_tokens: int = 12, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=True, **kwargs)


def converse(engine, tokenizer, turns: int, params, answers=ANSWERS) -> list[list]:
    """``turns`` turns of every conversation, all of a turn in one step: each next prompt is the last
    prompt, its reply's tokens and an answer. The outputs of every turn."""
    prompts = [tokenizer.encode(o) for o in OPENINGS]
    every = []
    for t in range(turns):
        handles = engine.submit_requests([(p, params) for p in prompts])
        outs = [h.result() for h in handles]
        every.append(outs)
        prompts = [
            p + o.completions[0].token_ids + tokenizer.encode(a * (t + 1), add_special_tokens=False)
            for p, o, a in zip(prompts, outs, answers, strict=True)
        ]
    return every


def tokens_of(turns: list[list]) -> list[list[list[int]]]:
    return [[c.token_ids for o in outs for c in o.completions] for outs in turns]


def logprobs_of(turns: list[list]) -> torch.Tensor:
    return torch.tensor([c.logprobs for outs in turns for o in outs for c in o.completions])


@pytest.mark.parametrize("chunk", [256, 8])  # 8: every later turn's rest is prefilled in chunks
def test_turns_reuse_the_conversation_and_give_the_re_prefill_tokens(engine_for, tokenizer, chunk):
    cached = engine_for(max_batch_size=4, prefill_chunk_tokens=chunk)
    plain = engine_for(max_batch_size=4, prefill_chunk_tokens=chunk, prefix_cache_gib=0)
    a, b = converse(cached, tokenizer, 3, greedy()), converse(plain, tokenizer, 3, greedy())
    assert tokens_of(a) == tokens_of(b)
    assert torch.allclose(logprobs_of(a), logprobs_of(b), atol=1e-4)
    stats, plain_stats = cached.stats(), plain.stats()
    assert stats["prompt_tokens"] == plain_stats["prompt_tokens"]
    assert plain_stats["prefix_cache_hit_tokens"] == 0
    # turns 2 and 3 reuse each conversation's previous prompt and all of its 12-token reply but the last
    previous = sum(len(o.prompt_token_ids) for outs in a[:2] for o in outs)
    assert stats["prefix_cache_hit_tokens"] == previous + 2 * len(OPENINGS) * 11
    assert cached.drain(10) and len(cached.batcher.prefix_cache) == len(
        OPENINGS
    )  # each used entry left it; the last turns' stay


def test_a_hit_beside_fresh_prompts_and_with_n_completions(engine_for, tokenizer):
    cached = engine_for(max_batch_size=8)
    plain = engine_for(max_batch_size=8, prefix_cache_gib=0)
    results = []
    for engine in (cached, plain):
        first = engine.generate(["12+34="], greedy())[0]
        follow = (
            first.prompt_token_ids
            + first.completions[0].token_ids
            + tokenizer.encode(" ok", add_special_tokens=False)
        )
        handles = engine.submit_requests(
            [(follow, greedy(n=3)), ("hello world", greedy()), (follow + [5], greedy())]
        )
        results.append([[c.token_ids for c in h.result().completions] for h in handles])
    assert results[0] == results[1]
    assert results[0][0] == [results[0][0][0]] * 3  # greedy: the n completions agree
    assert (
        cached.stats()["prefix_cache_hit_tokens"] == len(tokenizer.encode("12+34=")) + 11
    )  # one entry, one hit


def test_new_weights_empty_the_cache(engine_for, long_model, tokenizer):
    engine = engine_for(max_batch_size=4)
    converse(engine, tokenizer, 1, greedy())
    assert engine.drain(10)  # results go out before the finished completions are stored
    assert len(engine.batcher.prefix_cache) == len(OPENINGS)
    original = {k: v.clone() for k, v in long_model.state_dict().items()}
    engine.update_weights({k: v * 1.01 for k, v in original.items()})
    try:
        again = converse(engine, tokenizer, 2, greedy())
        assert engine.stats()["prefix_cache_hit_tokens"] == sum(
            len(o.prompt_token_ids) + 11 for o in again[0]
        )
        plain = engine_for(max_batch_size=4, prefix_cache_gib=0)
        assert tokens_of(again) == tokens_of(converse(plain, tokenizer, 2, greedy()))
    finally:
        engine.update_weights(original)


def test_the_budget_bounds_the_cache():
    cache = PrefixCache(budget_bytes=3 * 80)  # three entries of 10 positions (keys and values, float32)
    for i in range(5):
        cache.put([i] * 10, torch.zeros(1, 2, 1, 10, 1) + i, generation=1)
    assert len(cache) == 3 and cache.nbytes == 240
    assert cache.match([0] * 11) is None and cache.match([4] * 12).tokens == (4,) * 10  # the oldest left
    cache.put(list(range(40)), torch.zeros(1, 2, 1, 40, 1), generation=1)  # larger than the budget
    assert len(cache) == 3 and cache.match(list(range(41))) is None
    assert cache.match([4] * 11).usable(11) == 10  # the last token of the prompt always runs
    assert cache.match([4] * 10) is None  # the same prompt again is prefilled afresh
    cache.forget_other_weights(2)
    assert len(cache) == 0 and cache.nbytes == 0


def test_the_longest_entry_is_taken_once_per_completion():
    cache = PrefixCache(budget_bytes=10**6)
    cache.put([1, 2], torch.zeros(1, 2, 1, 2, 1), generation=0)
    cache.put([1, 2, 3, 4], torch.zeros(1, 2, 1, 4, 1), generation=0)
    entry = cache.match([1, 2, 3, 4, 5])
    assert entry.tokens == (1, 2, 3, 4)
    cache.take(entry)
    assert cache.match([1, 2, 3, 4, 5]).tokens == (1, 2) and len(cache) == 1
    cache.put([1, 2], torch.zeros(1, 2, 1, 2, 1), generation=0)  # a second completion ended the same way
    for _ in range(2):
        cache.take(cache.match([1, 2, 3]))
    assert len(cache) == 0 and cache.nbytes == 0


def test_sampled_turns_repeat_for_a_seed(engine_for, tokenizer):
    params = SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True, logprobs=True, seed=7)
    runs = [converse(engine_for(max_batch_size=4), tokenizer, 3, params) for _ in range(2)]
    assert tokens_of(runs[0]) == tokens_of(runs[1])
    assert torch.equal(logprobs_of(runs[0]), logprobs_of(runs[1]))


def test_rests_padded_past_the_context_run_one_by_one(engine_for, tokenizer):
    """One conversation near the context with a short rest, one early with a long rest: padded together
    they would pass ``max_model_len`` (64), so each runs alone; the tokens are the re-prefill's."""
    long_opening, short_opening = "hello world " * 4, "a"  # 49 and 2 tokens with BOS
    results, hits = [], []
    for cache in (None, 0):
        engine = engine_for(
            max_batch_size=2, max_model_len=64, **({} if cache is None else {"prefix_cache_gib": 0})
        )
        firsts = engine.generate([long_opening, short_opening], greedy(6))
        follow = [
            firsts[0].prompt_token_ids + firsts[0].completions[0].token_ids + tokenizer.encode("!", add_special_tokens=False),
            firsts[1].prompt_token_ids + firsts[1].completions[0].token_ids + tokenizer.encode(" go on" * 5, add_special_tokens=False),
        ]  # fmt: skip
        assert len(follow[0]) == 56 and len(follow[1]) == 38
        outs = engine.generate(follow, greedy(6))
        results.append([o.completions[0].token_ids for o in outs])
        hits.append(engine.stats()["prefix_cache_hit_tokens"])
    assert results[0] == results[1]
    assert hits == [(49 + 5) + (2 + 5), 0]  # starts 54 and 7; rests 2 and 31: 54 + 31 > 64
