"""Chunked prefill in the torch engine: the same greedy tokens as one-forward prefill, running streams
keep getting tokens while a long prompt is prefilled, slots, cancellation and n > 1."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from toolbox.serving.engine import SamplingParams

LONG = "the quick brown fox 99 jumps over 12+34=46, hello world! " * 2  # 115 tokens with BOS: 8 chunks of 16
SHORT = ["12+34=", "hello world", "a"]
# greedy, 24 tokens, of LONG on the 4096-position model below: pinned (transformers' generate and the
# engine's one-forward prefill give the same)
LONG_PINNED = [45, 23, 10, 44, 4, 16, 3, 16, 1, 44, 19, 4, 45, 45, 45, 45, 45, 45, 45, 45, 50, 4, 11, 4]


@pytest.fixture
def engine_for(engine_for, long_model, tokenizer):
    """conftest's ``engine_for`` on this file's model: ``engine_for(**spec)``."""
    return lambda **spec: engine_for(long_model, tokenizer, **spec)


def greedy(max_tokens: int = 24, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kwargs)


def settled(engine) -> dict[str, int]:
    """The engine's stats once its thread has retired what finished (results arrive just before)."""
    deadline = time.monotonic() + 10
    while engine.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine.stats()


def beside_a_stream(engine, submit) -> tuple[list[int], list]:
    """Start a greedy stream of "hello world", and once it has 2 tokens call ``submit()`` (a list of
    handles); the stream's tokens and the handles' outputs."""

    async def scenario():
        started = asyncio.Event()
        tokens: list[int] = []

        async def run():
            async for delta in engine.stream("hello world", greedy(60)):
                tokens.extend(delta.token_ids)
                if len(tokens) == 2:
                    started.set()

        task = asyncio.create_task(run())
        await started.wait()
        outs = [await h.wait() for h in submit()]
        await task
        return tokens, outs

    return asyncio.run(scenario())


def log_steps(engine, monkeypatch) -> list[str]:
    """Record the order of the runner's chunk and decode steps."""
    steps: list[str] = []
    for name, label in (("prefill_at", "chunk"), ("decode", "decode")):
        original = getattr(engine.runner, name)

        def spy(*args, _original=original, _label=label, **kwargs):
            steps.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(engine.runner, name, spy)
    return steps


def count_chunks(engine, monkeypatch) -> list[int]:
    """Record the length of every chunk ``prefill_at`` runs."""
    seen: list[int] = []
    original = engine.runner.prefill_at

    def spy(slot, tokens, start):
        seen.append(len(tokens))
        return original(slot, tokens, start)

    monkeypatch.setattr(engine.runner, "prefill_at", spy)
    return seen


def test_greedy_tokens_equal_one_forward_prefill(engine_for, monkeypatch):
    """A prompt of 8 chunks and short ones, all at once, with n=2 and seeded sampling: the same tokens
    as without chunking (and LONG's pinned greedy tokens)."""
    prompts = [LONG, *SHORT, LONG[:40]]
    plain = engine_for(prefill_chunk_tokens=None)
    chunked = engine_for(prefill_chunk_tokens=16)
    chunks = count_chunks(chunked, monkeypatch)
    submit = chunked.batcher.submit

    def slow_submit(*args, **kwargs):  # a descheduled caller: generate still queues its prompts together
        handle = submit(*args, **kwargs)
        time.sleep(0.05)
        return handle

    monkeypatch.setattr(chunked.batcher, "submit", slow_submit)
    params = [greedy(24), greedy(24, n=2), SamplingParams(max_tokens=16, temperature=0.8, seed=3, n=2)]
    for p in params:
        want = plain.generate(prompts, p)
        got = chunked.generate(prompts, p)
        assert [[c.token_ids for c in o.completions] for o in got] == [
            [c.token_ids for c in o.completions] for o in want
        ]
    assert plain.generate([LONG], greedy(24))[0].completions[0].token_ids == LONG_PINNED
    # per generate call LONG (115 tokens with BOS) in chunks of 16, then LONG[:40] (41 tokens; one long
    # prompt at a time, first come first served, the next starting in the 13 tokens LONG's last chunk
    # leaves); the short prompts unchunked, beside LONG's chunks
    assert chunks == 3 * ([16] * 7 + [3] + [13, 16, 12])
    assert settled(chunked)["running"] == 0


def test_running_stream_gets_tokens_between_the_chunks(engine_for, monkeypatch):
    """A stream is decoding when a 3000-token prompt arrives. Without chunking it gets no token until
    that prompt is prefilled whole; with chunks of 64 the engine runs a decode step after each chunk,
    and the stream's longest inter-token gap shrinks accordingly (compared with the unchunked gap in
    the same test, so a loaded machine slows both; up to 3 attempts against a pause by other jobs)."""
    long = (LONG * 30)[:3000]

    async def scenario(engine):
        steps = log_steps(engine, monkeypatch)
        stamps: list[float] = []  # arrival of each token of the running stream
        window: list[float] = []  # the long prompt submitted, its first token arrived

        async def running():
            async for _ in engine.stream("12+34=", greedy(4000 - 7)):
                stamps.append(time.perf_counter())
                if len(stamps) == 5:
                    started.set()
                if len(window) == 2 and len(stamps) > 3 and stamps[-3] > window[1]:
                    return

        async def long_one():
            await started.wait()
            handle = engine.submit(long, greedy(4))  # tokenized here, before the window opens
            window.append(time.perf_counter())
            async for _ in handle:
                if len(window) == 1:
                    window.append(time.perf_counter())

        started = asyncio.Event()
        await asyncio.gather(running(), long_one())
        t0, t1 = window
        # the inter-token gaps that overlap the long prompt's prefill, and the tokens inside it
        gaps = [b - a for a, b in itertools.pairwise(stamps) if b > t0 and a < t1]
        chunks = [i for i, step in enumerate(steps) if step == "chunk"]
        between = steps[chunks[0] : chunks[-1]] if chunks else []
        return max(gaps), (len(chunks), between.count("decode"))

    spec = {"max_batch_size": 4, "max_queue_size": 4}  # a small KV cache: its growth is not the point
    outcomes = []
    for _ in range(3):
        plain_gap, plain_steps = asyncio.run(scenario(engine_for(prefill_chunk_tokens=None, **spec)))
        chunk_gap, chunk_steps = asyncio.run(scenario(engine_for(prefill_chunk_tokens=64, **spec)))
        outcomes.append((plain_gap, chunk_gap))
        # 3001 tokens (with BOS) in 47 chunks, a decode step of the running stream after each but the last
        assert plain_steps == (0, 0) and chunk_steps == (47, 46)
        if chunk_gap < 0.4 * plain_gap:
            break
    else:
        pytest.fail(f"the chunked gap was never below 0.4x the unchunked one: {outcomes}")


def test_a_short_request_behind_a_long_prompt_does_not_wait_for_its_prefill(engine_for, monkeypatch):
    """A short request arrives at the long prompt's 3rd of 47 chunks: it is prefilled beside the next
    chunk and has finished (its solo tokens) long before the long prompt's last chunk."""
    engine = engine_for(prefill_chunk_tokens=64, max_batch_size=4)
    solo = engine.generate(["12+34="], greedy(3))[0].completions[0].token_ids
    original = engine.runner.prefill_at
    short, done = [], []

    def spy(slot, tokens, start):
        if len(done) == 2:
            short.append(engine.submit("12+34=", greedy(3), stream=False))
        done.append(bool(short) and short[0].done)
        return original(slot, tokens, start)

    monkeypatch.setattr(engine.runner, "prefill_at", spy)
    engine.generate([(LONG * 30)[:3000]], greedy(2))
    assert len(done) == 47 and done.index(True) <= 8
    assert short[0].result(timeout=10).completions[0].token_ids == solo


def test_cancel_during_a_chunked_prefill_frees_its_slots(engine_for, monkeypatch):
    """Cancelled after its 3rd chunk: it ends with finish_reason abort, no more chunks run, and with
    max_batch_size=2 a request of n=2 then gets both slots."""
    engine = engine_for(prefill_chunk_tokens=16, max_batch_size=2)
    seen: list[int] = []
    original = engine.runner.prefill_at
    handle = None

    def spy(slot, tokens, start):
        seen.append(slot)
        if len(seen) == 3:
            handle.cancel()
        return original(slot, tokens, start)

    monkeypatch.setattr(engine.runner, "prefill_at", spy)
    handle = engine.submit(LONG, greedy(24), stream=False)
    out = handle.result(timeout=60)
    assert [c.finish_reason for c in out.completions] == ["abort"] and out.completions[0].token_ids == []
    assert seen == [1, 1, 1]  # the top slot (max_batch_size - n), cancelled before a 4th chunk
    both = engine.generate([LONG], greedy(24, n=2))[0]
    assert [c.token_ids for c in both.completions] == [LONG_PINNED, LONG_PINNED]
    assert seen[3:] == [0] * 8  # n=2: its prompt in slot 0, copied into slots 0 and 1
    assert settled(engine)["running"] == 0 and settled(engine)["waiting"] == 0


def test_slots_reserved_for_a_chunked_prompt_are_not_given_away(engine_for):
    """max_batch_size=3: a stream runs in slot 0, a long prompt with n=2 reserves slots 1-2 while it
    is chunked, short requests arriving meanwhile wait for a slot: everyone gets its solo output."""
    solo_engine = engine_for(prefill_chunk_tokens=None)
    solo = {
        "run": solo_engine.generate(["hello world"], greedy(60))[0].completions[0].token_ids,
        "long": [c.token_ids for c in solo_engine.generate([LONG], greedy(24, n=2))[0].completions],
        "short": [solo_engine.generate([p], greedy(10))[0].completions[0].token_ids for p in SHORT],
    }
    engine = engine_for(prefill_chunk_tokens=8, max_batch_size=3)
    tokens, outs = beside_a_stream(
        engine,
        lambda: [
            engine.submit(LONG, greedy(24, n=2), stream=False),
            *[engine.submit(p, greedy(10), stream=False) for p in SHORT],
        ],
    )
    assert tokens == solo["run"]
    assert [c.token_ids for c in outs[0].completions] == solo["long"]
    assert [o.completions[0].token_ids for o in outs[1:]] == solo["short"]
    assert settled(engine)["running"] == 0


def test_the_next_long_prompt_starts_in_the_budget_the_last_chunk_leaves(engine_for, monkeypatch):
    """max_batch_size=4, a stream in slot 0: LONG (n=1) and then a 41-token prompt with n=2 arrive.
    The second starts in the 13 tokens LONG's last chunk leaves, in slots LONG's completion does not
    take; everyone gets its solo tokens."""
    second = LONG[:40]
    solo_engine = engine_for(prefill_chunk_tokens=None)
    solo = {
        "run": solo_engine.generate(["hello world"], greedy(60))[0].completions[0].token_ids,
        "long": solo_engine.generate([LONG], greedy(24))[0].completions[0].token_ids,
        "second": [c.token_ids for c in solo_engine.generate([second], greedy(24, n=2))[0].completions],
    }
    engine = engine_for(prefill_chunk_tokens=16, max_batch_size=4)
    slots: list[tuple[int, int]] = []
    original = engine.runner.prefill_at

    def spy(slot, tokens, start):
        slots.append((slot, len(tokens)))
        return original(slot, tokens, start)

    monkeypatch.setattr(engine.runner, "prefill_at", spy)

    def submit():
        slots.clear()  # the stream's own prompt (12 tokens) is not chunked at 16 anyway
        # both queued before the engine thread looks again: on a loaded machine this thread was once
        # descheduled between the two submits, past LONG's chunks
        with engine.batcher.together():
            return [
                engine.submit(LONG, greedy(24), stream=False),
                engine.submit(second, greedy(24, n=2), stream=False),
            ]

    tokens, outs = beside_a_stream(engine, submit)
    assert slots == [(3, 16)] * 7 + [(3, 3), (2, 13), (2, 16), (2, 12)]
    assert tokens == solo["run"]
    assert outs[0].completions[0].token_ids == solo["long"]
    assert [c.token_ids for c in outs[1].completions] == solo["second"]
    assert settled(engine)["running"] == 0


def test_chunk_size_errors(engine_for):
    from toolbox.core.errors import ConfigError

    with pytest.raises(ConfigError, match="prefill_chunk_tokens: expected int >= 1"):
        engine_for(prefill_chunk_tokens=0)
