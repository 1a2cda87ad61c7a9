"""The torch engine's decode step on a CPU: the compiled decode attention and the per-step delivery.

The compiled kernel (``decode_attention.py``) must give SDPA's numbers (every head layout, rows of
different lengths) and the same greedy tokens end to end; a step's stream deltas reach an event loop
in one wake-up, in order.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
import torch.nn.functional as F

from tests.serving.conftest import make_bench_model
from toolbox.core.errors import ConfigError
from toolbox.serving.engine import SamplingParams
from toolbox.serving.engines.torch import decode_attention


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)])
def test_the_compiled_kernel_equals_sdpa_on_cache_views(heads, kv_heads):
    """Rows of different lengths in a cache longer than they are (the runner's views); grouped-query
    and multi-query attention; a scale other than 1/sqrt(D)."""
    assert decode_attention.warm_up(torch.device("cpu"), torch.float32, heads, kv_heads, 32) is None
    torch.manual_seed(0)
    b, capacity, d, length = 17, 40, 32, 29
    qk = torch.randn(b, heads + kv_heads, 1, d)
    k_cache, v_cache = torch.randn(b + 3, kv_heads, capacity, d), torch.randn(b + 3, kv_heads, capacity, d)
    positions = torch.randint(0, length, (b,))
    positions[0] = length - 1
    q, k, v = qk[:, :heads], k_cache[:b, :, :length], v_cache[:b, :, :length]
    mask = (torch.arange(length).view(1, length) <= positions.view(b, 1)).view(b, 1, 1, length)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=heads != kv_heads)
    with torch.inference_mode():
        q, k, v, positions = (t.clone() for t in (q, k, v, positions))  # inference tensors, as served
        k, v = (
            torch.cat([t, torch.zeros(b, kv_heads, capacity - length, d)], 2)[:, :, :length] for t in (k, v)
        )
        scale = torch.tensor(0.3)
        got = decode_attention.compiled()(q, k, v, positions, scale)
        plain = decode_attention.decode_attention(q, k, v, positions, scale)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain, want, rtol=1e-5, atol=1e-5)


def test_compiled_decode_attention_gives_sdpas_greedy_tokens(engine_for, tokenizer):
    """The 512-wide benchmark model: ``attention=auto`` compiles the kernel on this CPU and decodes a
    batch of 20 with it; its greedy tokens are SDPA's, token for token."""
    model = make_bench_model(tokenizer)
    fast, plain = engine_for(model, tokenizer), engine_for(model, tokenizer, attention="sdpa")
    assert fast.runner._fused_decode is not None and plain.runner._fused_decode is None
    calls = []
    kernel = fast.runner._fused_decode
    fast.runner._fused_decode = lambda *a: calls.append(a[0].shape[0]) or kernel(*a)
    prompts = [f"{i} + {i * 7 % 13} = {'abc'[i % 3]}" for i in range(20)]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    a = [o.completions[0].token_ids for o in fast.generate(prompts, params)]
    b = [o.completions[0].token_ids for o in plain.generate(prompts, params)]
    assert a == b
    # 4 layers x 11 decode steps (a step or two fewer if the first requests started alone)
    assert len(calls) >= 4 * 9 and min(calls) >= decode_attention.MIN_BATCH
    assert len({tuple(t) for t in a}) > 5  # varied outputs, not one degenerate string


def test_the_attention_setting(engine_for, model, tokenizer, caplog):
    assert engine_for(model, tokenizer).runner._fused_decode is None  # 64 wide: SDPA
    assert engine_for(model, tokenizer, attention="compiled").runner._fused_decode is not None
    with pytest.raises(ConfigError, match="engine.attention: expected .*'auto', 'compiled', 'sdpa'.*'flash'"):
        engine_for(model, tokenizer, attention="flash")
    # where torch.compile cannot run, "auto" keeps SDPA with a warning and "compiled" refuses
    with torch._dynamo.config.patch(disable=True):
        with pytest.raises(ConfigError, match="attention=compiled: torch.compile does not run here"):
            engine_for(model, tokenizer, attention="compiled")
        with caplog.at_level("WARNING"):
            wide = engine_for(make_bench_model(tokenizer), tokenizer)
    assert wide.runner._fused_decode is None
    assert "decode attention stays on SDPA" in caplog.text and "TORCH_COMPILE_DISABLE" in caplog.text
    from toolbox.serving.engines.torch.runner import SlotRunner

    with pytest.raises(ConfigError, match="engine.attention='flash': use auto, compiled or sdpa"):
        SlotRunner(model, 2, 64, attention="flash")


def test_a_decode_step_wakes_each_event_loop_once(engine_for, model, tokenizer):
    """20 streams of 8 tokens: every delta arrives, in order, ending with the finish reason; the
    engine thread calls into the loop about once per step (not once per token: 160 deltas)."""
    engine = engine_for(model, tokenizer, max_batch_size=32)
    prompts = [f"{i}+{i}=" for i in range(20)]
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    want = {o.prompt_token_ids.__repr__(): o.completions[0] for o in engine.generate(prompts, params)}

    async def scenario():
        loop = asyncio.get_running_loop()
        wakeups = []
        original = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            wakeups.append(1)
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counting

        async def one(prompt):
            handle = engine.submit(prompt, params, stream=True)
            return handle.prompt_token_ids, [d async for d in handle]

        return await asyncio.gather(*(one(p) for p in prompts)), len(wakeups)

    streams, wakeups = asyncio.run(scenario())
    for prompt_ids, deltas in streams:
        done = want[repr(prompt_ids)]
        assert [t for d in deltas for t in d.token_ids] == done.token_ids
        assert "".join(d.text for d in deltas) == done.text
        assert [d.finish_reason for d in deltas] == [None] * 7 + ["length"]
    assert wakeups <= 2 * (8 + 2), wakeups  # prefill + 7 decode steps (a few more if arrivals split)


def test_no_compilation_while_serving(engine_for, model, tokenizer):
    """16 sequences decoded past the cache's first capacity (128 positions, then 256), with lengths
    that hit the capacity exactly: every step runs what start-up compiled (a recompilation would
    raise here), and the tokens are SDPA's."""
    fast = engine_for(model, tokenizer, attention="compiled", max_batch_size=16)
    plain = engine_for(model, tokenizer, attention="sdpa", max_batch_size=16)
    prompts = [f"{i}*{i}={'x' * i}" for i in range(16)]
    params = SamplingParams(max_tokens=140, temperature=0.0, ignore_eos=True)
    kernel, lengths = fast.runner._fused_decode, []
    fast.runner._fused_decode = lambda *a: lengths.append(a[1].shape[2]) or kernel(*a)
    with torch.compiler.set_stance("fail_on_recompile"):
        a = [o.completions[0].token_ids for o in fast.generate(prompts, params)]
    assert fast.runner.capacity == 256 and max(lengths) > 128
    assert a == [o.completions[0].token_ids for o in plain.generate(prompts, params)]
