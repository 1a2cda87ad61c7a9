"""The torch engine: greedy = HF generate, stops, n, logprobs, continuous batching, cancel, queue, weights."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest
import torch

from tests.serving.conftest import make_bench_model
from toolbox.core.errors import ConfigError
from toolbox.core.registries import ENGINES
from toolbox.serving.engine import PromptTooLongError, QueueFullError, SamplingParams

PROMPTS = ["12+34=", "hello world", "a", "the quick brown fox 99"]


def hf_greedy(model, tokenizer, prompt: str, max_tokens: int, **kwargs) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False, **kwargs
        )
    return out[0, ids.shape[1] :].tolist()


@pytest.fixture
def engine(engine_for, model, tokenizer):
    return engine_for(model, tokenizer)


def greedy(max_tokens: int = 24, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kwargs)


def test_greedy_equals_hf_generate_in_one_batch(engine, model, tokenizer):
    outs = engine.generate(PROMPTS, greedy(24))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert out.prompt_token_ids == tokenizer(prompt)["input_ids"]
        assert out.completions[0].token_ids == hf_greedy(model, tokenizer, prompt, 24)


def test_greedy_equals_hf_with_eos_and_repetition_penalty(engine_for, model, tokenizer):
    prompt = PROMPTS[0]
    free = hf_greedy(model, tokenizer, prompt, 30)
    eos = free[7]  # make a token the greedy path reaches the model's eos
    m = copy.deepcopy(model)
    m.generation_config.eos_token_id = [eos, tokenizer.eos_token_id]  # the engine stops at both too
    eng = engine_for(m, tokenizer)
    out = eng.generate([prompt], greedy(30))[0].completions[0]
    assert out.token_ids == hf_greedy(m, tokenizer, prompt, 30)
    assert out.token_ids[-1] in (eos, tokenizer.eos_token_id) and out.finish_reason == "stop"
    assert len(eng.generate([prompt], greedy(30, ignore_eos=True))[0].completions[0].token_ids) == 30
    penalised = eng.generate([prompt], greedy(30, repetition_penalty=1.5))[0].completions[0]
    assert penalised.token_ids == hf_greedy(m, tokenizer, prompt, 30, repetition_penalty=1.5)
    assert penalised.token_ids != out.token_ids


def test_stop_token_ids_and_max_tokens(engine, tokenizer):
    free = engine.generate([PROMPTS[1]], greedy(20))[0].completions[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 20
    stop_id = free.token_ids[5]
    first = free.token_ids.index(stop_id)
    out = engine.generate([PROMPTS[1]], greedy(20, stop_token_ids=[stop_id]))[0].completions[0]
    assert out.token_ids == free.token_ids[: first + 1]
    assert out.finish_reason == "stop"
    assert out.text == tokenizer.decode(free.token_ids[:first], skip_special_tokens=True)


def test_stop_strings_cut_the_text_and_never_stream(engine, tokenizer):
    free = engine.generate([PROMPTS[3]], greedy(30))[0].completions[0]
    text = free.text
    stop = text[6:8]
    out = engine.generate([PROMPTS[3]], greedy(30, stop=[stop, "@@never"]))[0].completions[0]
    assert out.text == text[: text.index(stop)]
    assert out.finish_reason == "stop"
    assert stop in tokenizer.decode(out.token_ids, skip_special_tokens=True)  # ids run up to the stop string

    async def collect():
        return [d async for d in engine.stream(PROMPTS[3], greedy(30, stop=[stop]))]

    deltas = asyncio.run(collect())
    assert "".join(d.text for d in deltas) == out.text
    assert [t for d in deltas for t in d.token_ids] == out.token_ids
    assert deltas[-1].finish_reason == "stop" and all(d.finish_reason is None for d in deltas[:-1])


def test_n_completions_greedy_agree_and_seeded_sampling_repeats(engine):
    out = engine.generate([PROMPTS[0]], greedy(12, n=3))[0]
    assert len(out.completions) == 3 and len({tuple(c.token_ids) for c in out.completions}) == 1
    params = SamplingParams(max_tokens=12, temperature=1.0, n=4, seed=11)
    a = engine.generate([PROMPTS[0]], params)[0]
    b = engine.generate([PROMPTS[0], PROMPTS[1]], params)[0]  # another prompt beside it changes nothing
    assert [c.token_ids for c in a.completions] == [c.token_ids for c in b.completions]
    assert len({tuple(c.token_ids) for c in a.completions}) > 1
    c = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=12, temperature=1.0, n=4, seed=12))[0]
    assert [x.token_ids for x in c.completions] != [x.token_ids for x in a.completions]


def test_logprobs_are_log_softmax_of_the_model_logits(engine, model, tokenizer):
    for params in (
        greedy(10, logprobs=True),
        SamplingParams(max_tokens=10, temperature=0.8, top_k=5, seed=1, logprobs=True),
    ):
        out = engine.generate([PROMPTS[2]], params)[0]
        tokens = out.completions[0].token_ids
        full = torch.tensor([out.prompt_token_ids + tokens])
        with torch.inference_mode():
            logits = model(full).logits[0, len(out.prompt_token_ids) - 1 : -1]
        expected = torch.log_softmax(logits.float(), -1)[torch.arange(len(tokens)), torch.tensor(tokens)]
        torch.testing.assert_close(torch.tensor(out.completions[0].logprobs), expected, atol=1e-4, rtol=1e-4)


def test_top_logprobs_are_the_model_top_k(engine, model, tokenizer):
    """``top_logprobs=k``: at every step the k largest log_softmax values of the model's logits with
    their ids, most likely first, whatever the other rows of the batch ask for (here: none, 2, 5)."""
    params = [
        SamplingParams(max_tokens=8, temperature=0.9, seed=3, logprobs=True, top_logprobs=5),
        SamplingParams(max_tokens=8, temperature=0, logprobs=True, top_logprobs=2),
        SamplingParams(max_tokens=8, temperature=0),
    ]

    async def together():
        return await asyncio.gather(
            *[engine.generate_async(p, q) for p, q in zip(PROMPTS, params, strict=False)]
        )

    outs = asyncio.run(together())
    assert outs[2].completions[0].top_logprobs is None and outs[2].completions[0].logprobs is None
    for out, p in zip(outs[:2], params, strict=False):
        c = out.completions[0]
        full = torch.tensor([out.prompt_token_ids + c.token_ids])
        with torch.inference_mode():
            steps = model(full).logits[0, len(out.prompt_token_ids) - 1 : -1].float().log_softmax(-1)
        assert len(c.top_logprobs) == len(c.token_ids)
        for step, top, token, lp in zip(steps, c.top_logprobs, c.token_ids, c.logprobs, strict=True):
            values, ids = step.topk(p.top_logprobs)
            assert list(top) == ids.tolist()
            torch.testing.assert_close(torch.tensor(list(top.values())), values, atol=1e-4, rtol=0)
            if token in top:
                assert top[token] == pytest.approx(lp, abs=1e-6)
        if p.temperature == 0:  # greedy: the chosen token is the most likely one
            assert all(next(iter(top)) == t for top, t in zip(c.top_logprobs, c.token_ids, strict=True))


def test_requests_joining_a_running_batch_get_their_solo_output(engine):
    lengths = dict(zip(PROMPTS, [150, 40, 40, 30], strict=True))
    solo = {
        p: engine.generate([p], greedy(n, ignore_eos=True))[0].completions[0].token_ids
        for p, n in lengths.items()
    }

    async def scenario():
        started = {p: asyncio.Event() for p in PROMPTS}
        results, occupancy = {}, []

        async def one(prompt):
            tokens = []
            async for delta in engine.stream(prompt, greedy(lengths[prompt], ignore_eos=True)):
                tokens += delta.token_ids
                if len(tokens) >= 3:
                    started[prompt].set()
            results[prompt] = tokens

        first = asyncio.create_task(one(PROMPTS[0]))
        await started[PROMPTS[0]].wait()  # the first is decoding when the next two arrive
        later = [asyncio.create_task(one(p)) for p in PROMPTS[1:3]]
        await started[PROMPTS[1]].wait()
        occupancy.append(engine.stats()["running"])
        last = await engine.generate_async(PROMPTS[3], greedy(lengths[PROMPTS[3]], ignore_eos=True))
        results[PROMPTS[3]] = last.completions[0].token_ids
        await asyncio.gather(first, *later)
        return results, occupancy

    results, occupancy = asyncio.run(scenario())
    assert occupancy[0] >= 2  # they really shared the batch
    assert results == solo


def test_a_greedy_request_is_unaffected_by_sampled_neighbours(engine):
    alone = engine.generate([PROMPTS[1]], greedy(20))[0].completions[0].token_ids
    handles = [
        engine.submit(PROMPTS[0], SamplingParams(max_tokens=30, temperature=1.2, top_p=0.9, min_p=0.05))
    ]
    handles.append(engine.submit(PROMPTS[1], greedy(20), stream=False))
    handles.append(
        engine.submit(PROMPTS[2], SamplingParams(max_tokens=25, temperature=0.7, repetition_penalty=1.3))
    )
    assert handles[1].result(timeout=60).completions[0].token_ids == alone
    for h in handles:
        h.result(timeout=60)


def test_cancel_a_stream_and_a_waiting_request(engine_for, model, tokenizer):
    eng = engine_for(model, tokenizer, max_batch_size=1)

    async def scenario():
        seen = []
        agen = eng.stream(PROMPTS[0], SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True))
        async for delta in agen:
            seen.append(delta)
            if len(seen) == 3:
                break
        await agen.aclose()  # what a server does when the client disconnects
        waiting = eng.submit(PROMPTS[1], greedy(200, ignore_eos=True), stream=False)
        blocker = eng.submit(PROMPTS[2], greedy(5), stream=False)
        waiting.cancel()
        return seen, await waiting.wait(), await blocker.wait()

    seen, cancelled, other = asyncio.run(scenario())
    assert len(seen) == 3
    assert [c.finish_reason for c in cancelled.completions] == ["abort"]
    assert len(other.completions[0].token_ids) == 5
    deadline = time.monotonic() + 10
    while eng.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    # prefilled: "12+34=" and "a" with their BOS (7 + 2 tokens); the cancelled request never was
    assert eng.stats() == {
        "waiting": 0, "running": 0, "max_batch_size": 1, "max_queue_size": 256,
        "prompt_tokens": 9, "prefix_cache_hit_tokens": 0,
    }  # fmt: skip


def test_a_full_queue_raises_queue_full(engine_for, model, tokenizer):
    eng = engine_for(model, tokenizer, max_batch_size=1, max_queue_size=1)
    long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
    running = eng.submit(PROMPTS[0], long, stream=False)
    deadline = time.monotonic() + 10
    while eng.stats()["running"] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    waiting = eng.submit(PROMPTS[1], long, stream=False)
    with pytest.raises(QueueFullError, match="max_queue_size=1"):
        eng.submit(PROMPTS[2], long, stream=False)
    running.cancel()
    waiting.cancel()
    assert running.result(timeout=10).completions[0].finish_reason == "abort"
    # offline generate is not limited by the queue
    assert len(eng.generate(PROMPTS, greedy(3))) == len(PROMPTS)


def test_prompt_and_parameter_errors(engine_for, model, tokenizer):
    eng = engine_for(model, tokenizer, max_model_len=32)
    with pytest.raises(PromptTooLongError, match="context is 32"):
        eng.generate(["x" * 40], greedy(4))
    with pytest.raises(ValueError, match="empty"):
        eng.generate([[]], greedy(4))
    with pytest.raises(ValueError, match="top_p"):
        eng.submit("a", SamplingParams(top_p=0.0))
    out = eng.generate(["abc"], greedy(100, ignore_eos=True))[0].completions[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 32 - 4  # bos + 3 chars


def test_update_weights_changes_outputs_and_matches_hf(engine_for, fresh_model, model_factory, tokenizer):
    eng = engine_for(fresh_model, tokenizer)
    before = eng.generate(PROMPTS[:2], greedy(16))
    other = model_factory(seed=5)
    eng.update_weights({f"module.{k}": v for k, v in other.state_dict().items()})
    after = eng.generate(PROMPTS[:2], greedy(16))
    assert [o.completions[0].token_ids for o in after] != [o.completions[0].token_ids for o in before]
    for prompt, out in zip(PROMPTS[:2], after, strict=True):
        assert out.completions[0].token_ids == hf_greedy(other, tokenizer, prompt, 16)
    with pytest.raises(KeyError, match="no parameter"):
        eng.update_weights({"nope.weight": torch.zeros(1)})


def test_a_shared_model_trained_in_place_is_followed(engine_for, fresh_model, tokenizer):
    eng = engine_for(fresh_model, tokenizer)
    eng.generate(PROMPTS[:1], greedy(8))
    with torch.no_grad():  # what an optimizer step does to the parameters
        for p in fresh_model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    out = eng.generate(PROMPTS[:1], greedy(16))[0].completions[0]
    assert out.token_ids == hf_greedy(fresh_model, tokenizer, PROMPTS[0], 16)


def test_chat_uses_the_chat_template(engine, tokenizer):
    messages = [{"role": "user", "content": "1+1="}]
    out = engine.chat([messages], greedy(6))[0]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert out.prompt_token_ids == list(expected)
    assert (
        out.completions[0].token_ids
        == engine.generate([list(expected)], greedy(6))[0].completions[0].token_ids
    )


def test_built_from_a_saved_folder_and_config_errors(model_dir, engine, tokenizer):
    from_path = ENGINES.build({"name": "torch", "path": str(model_dir), "max_batch_size": 4})
    try:
        assert from_path.generate(PROMPTS, greedy(12)) == engine.generate(PROMPTS, greedy(12))
    finally:
        from_path.shutdown()
    with pytest.raises(ConfigError, match="max_batch_sise"):
        ENGINES.build({"name": "torch", "max_batch_sise": 4})
    with pytest.raises(ConfigError, match="needs a model"):
        ENGINES.build({"name": "torch"})


def test_onednn_projections_equal_torch_linear_within_rounding(engine_for, model, tokenizer):
    """``linear=onednn`` (reordered weights) on this CPU; ``linear=torch`` is ``F.linear``: the
    same greedy tokens, log-probs within float rounding; float16 has no oneDNN path here. ``auto``
    takes oneDNN for models at least 384 wide only (the 64-wide test model: F.linear)."""
    onednn, plain = (
        engine_for(model, tokenizer, linear="onednn"),
        engine_for(model, tokenizer, linear="torch"),
    )
    assert onednn.runner.onednn and not plain.runner.onednn
    assert not engine_for(model, tokenizer).runner.onednn
    params = greedy(24, logprobs=True)
    a, b = onednn.generate(PROMPTS, params), plain.generate(PROMPTS, params)
    for x, y in zip(a, b, strict=True):
        assert x.completions[0].token_ids == y.completions[0].token_ids
        torch.testing.assert_close(x.completions[0].logprobs, y.completions[0].logprobs, atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="engine.linear=onednn needs a CPU model in float32 or bfloat16"):
        engine_for(copy.deepcopy(model).half(), tokenizer, linear="onednn")
    assert engine_for(make_bench_model(tokenizer), tokenizer).runner.onednn  # 512 wide


def test_prefill_threads_apply_to_prefill_steps_only(engine_for, model, tokenizer, monkeypatch):
    """``prefill_threads=2`` with one decoding thread: the prefill forward runs with 2 intra-op
    threads, every decode step with 1, and the output is the same as with one thread throughout."""
    plain = engine_for(model, tokenizer).generate(PROMPTS, greedy(12))
    engine = engine_for(model, tokenizer, prefill_threads=2)
    seen: dict[str, set[int]] = {"prefill": set(), "decode": set()}
    runner = engine.runner
    for name in seen:
        original = getattr(runner, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            seen[_name].add(torch.get_num_threads())
            return _original(*args, **kwargs)

        monkeypatch.setattr(runner, name, spy)
    assert engine.generate(PROMPTS, greedy(12)) == plain  # one_torch_thread: decoding with 1
    assert seen == {"prefill": {2}, "decode": {1}}
    with pytest.raises(ConfigError, match="prefill_threads: expected int >= 1"):
        engine_for(model, tokenizer, prefill_threads=0)


def test_unsupported_architectures_and_fields_are_named(tokenizer):
    import transformers

    vocab = len(tokenizer)
    opt = transformers.OPTForCausalLM(
        transformers.OPTConfig(
            vocab_size=vocab, hidden_size=64, num_hidden_layers=1, ffn_dim=64, num_attention_heads=2
        )
    )
    with pytest.raises(ConfigError, match="not opt; use engine=hf"):
        ENGINES.build({"name": "torch"}, model=opt, tokenizer=tokenizer)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=vocab, n_embd=64, n_layer=1, n_head=2, reorder_and_upcast_attn=True
        )
    )
    with pytest.raises(ConfigError, match="reorder_and_upcast_attn=True; set it false, or use engine=hf"):
        ENGINES.build({"name": "torch"}, model=gpt2, tokenizer=tokenizer)
    gemma2 = transformers.Gemma2ForCausalLM(_config("gemma2", vocab, attn_logit_softcapping=50.0))
    with pytest.raises(ConfigError, match="attn_logit_softcapping=50.0; set it null"):
        ENGINES.build({"name": "torch"}, model=gemma2, tokenizer=tokenizer)
    short = transformers.Gemma2ForCausalLM(_config("gemma2", vocab, sliding_window=64))
    with pytest.raises(ConfigError, match="sliding window"):
        ENGINES.build({"name": "torch", "max_model_len": 128}, model=short, tokenizer=tokenizer)
    both = transformers.Gemma3ForCausalLM(_config("gemma3", vocab, use_bidirectional_attention=True))
    with pytest.raises(ConfigError, match="use_bidirectional_attention=True; set it false"):
        ENGINES.build({"name": "torch"}, model=both, tokenizer=tokenizer)


def test_a_failed_step_fails_its_requests_and_the_engine_keeps_serving(
    engine_for, model, tokenizer, monkeypatch
):
    from toolbox.serving.engine import EngineError

    eng = engine_for(model, tokenizer)
    decode, calls = eng.runner.decode, []

    def broken_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return decode(*args, **kwargs)

    monkeypatch.setattr(eng.runner, "decode", broken_once)
    with pytest.raises(EngineError, match="RuntimeError: boom"):
        eng.generate([PROMPTS[0]], greedy(5))
    assert eng.stats()["running"] == 0
    assert len(eng.generate([PROMPTS[0]], greedy(5, ignore_eos=True))[0].completions[0].token_ids) == 5


def test_drain_waits_for_requests_in_flight(engine_for, model, tokenizer):
    eng = engine_for(model, tokenizer, max_batch_size=2)
    handles = [eng.submit(p, greedy(60, ignore_eos=True), stream=False) for p in PROMPTS]
    assert eng.drain(timeout=60)
    assert all(h.done for h in handles) and eng.stats()["waiting"] == eng.stats()["running"] == 0
    assert eng.drain(timeout=0)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_greedy_equals_hf_for_each_llama_family_with_grouped_query_attention(family, engine_for, tokenizer):
    import transformers

    config_class, model_class = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    }[family]
    config = getattr(transformers, config_class)(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=128,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(3)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)  # biases (qwen2) and norms (qwen3) too
    eng = engine_for(model, tokenizer)
    for prompt, out in zip(PROMPTS, eng.generate(PROMPTS, greedy(16)), strict=True):
        assert out.completions[0].token_ids == hf_greedy(model, tokenizer, prompt, 16), prompt


def test_batch_limit_follows_the_kv_cache_budget(model, tokenizer):
    from toolbox.core.registries import ENGINES
    from toolbox.serving.engines.torch.engine import MAX_AUTO_BATCH, kv_bytes_per_slot

    per_slot = kv_bytes_per_slot(model, 256)
    assert per_slot == 2 * 2 * 2 * 32 * 256 * 4  # k and v, 2 layers, 2 heads of 32, 256 positions, fp32
    small = ENGINES.build(
        {"name": "torch", "kv_cache_gib": 8 * per_slot / 2**30}, model=model, tokenizer=tokenizer
    )
    default = ENGINES.build({"name": "torch"}, model=model, tokenizer=tokenizer)
    try:
        assert small.stats()["max_batch_size"] == 8
        assert default.stats()["max_batch_size"] == MAX_AUTO_BATCH  # 1 GiB holds 8192 such slots
    finally:
        small.shutdown()
        default.shutdown()


def _config(family: str, vocab: int, **overrides):
    """A tiny config of a non-Llama family: Gemma with grouped-query attention and a head_dim that
    is not hidden / heads, Gemma2 with its post norms, final softcapping and query_pre_attn_scalar,
    Gemma3 with q/k norms and two rotary bases, GPT-2 with learned positions, LayerNorms and
    Conv1D projections."""
    import transformers

    if family == "gpt2":
        fields = {"n_embd": 64, "n_layer": 2, "n_head": 2, "n_inner": 96, "n_positions": 128}
        fields["scale_attn_by_inverse_layer_idx"] = True  # a scaling per layer
        return transformers.GPT2Config(vocab_size=vocab, **{**fields, **overrides})
    fields = {
        "hidden_size": 96,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 128,
    }
    if family == "gemma3":  # q/k norms; a sliding (rotary base 1e4) and a full (1e6) layer
        fields |= {
            "final_logit_softcapping": 3.0,
            "query_pre_attn_scalar": 24,
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"],
        }
    if family == "gemma2":
        fields |= {
            "attn_logit_softcapping": None,
            "final_logit_softcapping": 3.0,
            "query_pre_attn_scalar": 24,
            "sliding_window": 128,
        }
    config_class = {
        "gemma": transformers.GemmaConfig,
        "gemma2": transformers.Gemma2Config,
        "gemma3": transformers.Gemma3TextConfig,
    }[family]
    return config_class(vocab_size=vocab, **{**fields, **overrides})


@pytest.mark.parametrize("family", ["gpt2", "gemma", "gemma2", "gemma3"])
def test_greedy_equals_hf_for_gpt2_and_gemma_families(family, engine_for, tokenizer):
    import transformers

    config = _config(
        family, len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model_class = {
        "gpt2": transformers.GPT2LMHeadModel,
        "gemma": transformers.GemmaForCausalLM,
        "gemma2": transformers.Gemma2ForCausalLM,
        "gemma3": transformers.Gemma3ForCausalLM,
    }[family]
    torch.manual_seed(3)
    model = model_class(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)  # biases, norms and position embeddings too
    # 2 slots for 4 prompts: the later requests join the running batch as earlier ones finish
    eng = engine_for(model, tokenizer, max_batch_size=2)
    outs = eng.generate(PROMPTS, greedy(16))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert out.completions[0].token_ids == hf_greedy(model, tokenizer, prompt, 16), prompt
    assert len({tuple(o.completions[0].token_ids) for o in outs}) > 1  # not one degenerate output
    # the logits themselves, prefilled and then decoded one step (closer than greedy tokens can tell)
    from toolbox.serving.engines.torch.runner import SlotRunner

    ids = tokenizer(PROMPTS[3])["input_ids"]
    runner = SlotRunner(model, max_slots=1, max_model_len=64, linear="torch")
    with torch.inference_mode():
        full = model(torch.tensor([ids])).logits[0]
        prefilled = runner.prefill([0], [ids[:-1]])
        step = runner.decode(
            torch.tensor([ids[-1]]), torch.tensor([len(ids) - 1]), len(ids) - 1, len(ids) - 1
        )
    torch.testing.assert_close(prefilled[0], full[-2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(step[0], full[-1], rtol=1e-5, atol=1e-5)
    # chunked prefill (prefill_at: a chunk after the cached ones) gives the same logits
    chunked = SlotRunner(model, max_slots=1, max_model_len=64, linear="torch")
    cut = len(ids) // 2
    with torch.inference_mode():
        chunked.prefill_at(0, ids[:cut], 0)
        second = chunked.prefill_at(0, ids[cut:], cut)
    torch.testing.assert_close(second[0], full[-1], rtol=1e-5, atol=1e-5)


def test_gemma_and_layer_norms_are_the_modules_bit_for_bit():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    from toolbox.serving.engines.torch.layer_weights import apply_norm, norm_of

    torch.manual_seed(0)
    gemma, layer = GemmaRMSNorm(64), torch.nn.LayerNorm(64)
    for norm in (gemma, layer):
        torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(layer.bias)
    x = torch.randn(3, 5, 64) * 3
    for norm in (gemma, layer):
        assert type(norm_of(norm, True)) is tuple
        assert torch.equal(apply_norm(norm_of(norm, True), x), norm(x))


def test_done_callbacks_run_once_when_the_request_finishes(engine_for, model, tokenizer):
    """``add_done_callback``: called once with the handle, from the engine's step, after its output
    is set (a waiter that sleeps on its own condition, as the episode runner's, reads it at once);
    added after the request finished, it runs at once; a failing callback fails nothing else."""
    import threading

    eng = engine_for(model, tokenizer, max_batch_size=2)
    seen, called = [], threading.Event()

    def fn(h):
        seen.append((h, h.done, threading.current_thread().name, h.result().completions[0].token_ids))
        called.set()

    handle = eng.submit(PROMPTS[0], greedy(30, ignore_eos=True), stream=False)
    handle.add_done_callback(lambda h: 1 / 0)  # logged; the step and the next callback go on
    handle.add_done_callback(fn)
    assert called.wait(60)
    tokens = handle.result().completions[0].token_ids
    assert seen == [(handle, True, "toolbox-torch-engine", tokens)] and len(tokens) == 30
    handle.add_done_callback(fn)
    assert seen[1] == (handle, True, threading.current_thread().name, tokens) and len(seen) == 2


def test_completion_callbacks_report_each_completion_as_it_finishes(engine_for, model, tokenizer):
    """``add_completion_callback``: each of a request's n completions is reported when it finishes,
    shorter ones first and before the request is done, as the output then holds it (a rollout
    continues an episode of a group without waiting for the group's longest first reply)."""
    eng = engine_for(model, tokenizer, max_batch_size=8)
    vocab = len(tokenizer)
    params = SamplingParams(
        n=6, max_tokens=40, temperature=1.0, seed=3, stop_token_ids=list(range(0, vocab, 3))
    )
    seen = []
    with eng.batcher.step_lock:  # (no step runs before the callback is in)
        handle = eng.submit(PROMPTS[0], params, stream=False)
        handle.add_completion_callback(lambda h, i, c: seen.append((i, c, h.done)))
    output = handle.result(60)
    lengths = [len(c.token_ids) for c in output.completions]
    assert len(set(lengths)) > 1, lengths  # (the seed gives completions of different lengths)
    assert sorted(i for i, _, _ in seen) == list(range(6))
    assert all(c == output.completions[i] for i, c, _ in seen)
    arrived = [len(c.token_ids) for _, c, _ in seen]
    assert arrived == sorted(arrived) and not seen[0][2]  # the first came before the request was done
    late = []  # registered after the request finished: every completion at once, here
    handle.add_completion_callback(lambda h, i, c: late.append(i))
    assert sorted(late) == list(range(6))
