"""``torch``: our engine for Hugging Face causal LMs, with continuous batching.

It runs Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma2 and Gemma 3 text (without attention-logit
softcapping) and GPT-2 models (``architectures.py`` says how, and names what it refuses); other families serve
through ``engine=hf``.

Offline (RL rollouts, evaluation)::

    engine = ENGINES.build({"name": "torch", "max_batch_size": 64}, model=model, tokenizer=tok)
    outs = engine.generate(["1+2=", "3+4="], SamplingParams(max_tokens=8, temperature=0))

Online (a server: submit from the event loop, stream, cancel on disconnect)::

    handle = engine.submit(prompt, params)          # QueueFullError -> 429/503, ValueError -> 400
    async for delta in handle:                      # StreamDelta per token; leaving the loop early
        ...                                         # (or handle.cancel()) aborts the request
    output = await engine.submit(prompt, params, stream=False).wait()

Every call goes through one scheduler thread (``scheduler.ContinuousBatcher``): requests submitted at
any time join the running batch at the next step and leave it when they finish.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import torch

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat
from toolbox.core.errors import ConfigError
from toolbox.core.registries import ENGINES
from toolbox.serving.engine import InferenceEngine, RequestOutput, SamplingParams, StreamDelta
from toolbox.serving.engines.loading import context_length, copy_weights_, eos_token_ids, resolve
from toolbox.serving.engines.torch.runner import SlotRunner
from toolbox.serving.engines.torch.scheduler import ContinuousBatcher, RequestHandle
from toolbox.serving.sampling import check_params
from toolbox.serving.structured import Grammars

MAX_AUTO_BATCH = 256


def kv_bytes_per_slot(model: Any, max_model_len: int) -> int:
    """Bytes of keys and values one sequence of ``max_model_len`` tokens caches."""
    config = model.config
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    itemsize = next(model.parameters()).element_size()
    return 2 * int(config.num_hidden_layers) * kv_heads * head_dim * max_model_len * itemsize


def batch_limit(model: Any, max_model_len: int, kv_cache_gib: float) -> int:
    """The slots a KV-cache budget of ``kv_cache_gib`` holds (1 .. ``MAX_AUTO_BATCH``)."""
    if kv_cache_gib <= 0:
        raise ConfigError(f"engine.kv_cache_gib must be > 0, got {kv_cache_gib}")
    slots = int(kv_cache_gib * 2**30) // kv_bytes_per_slot(model, max_model_len)
    return max(1, min(MAX_AUTO_BATCH, slots))


@ENGINES.register("torch")
class TorchEngine(InferenceEngine):
    """Our engine (Llama, Mistral, Qwen2/3, Gemma 1-3, GPT-2): slot KV cache, continuous batching.

    Build it with a model and tokenizer (``ENGINES.build(spec, model=..., tokenizer=...)``; the model
    is used as it is, shared with a trainer if you like) or from ``path`` (a ``save_pretrained``
    folder). Greedy output equals transformers ``generate``.

    Args:
        model: a ``*ForCausalLM`` of a family above (injected); None to load it from ``path``.
        tokenizer: its tokenizer (injected); None to load it from ``path``.
        path: a folder written by ``save_pretrained`` holding the model and the tokenizer.
        dtype: dtype of a model loaded from ``path`` (a given model keeps its own).
        device: where a model loaded from ``path`` goes ("auto": a GPU if one is visible; injected by
            a run). A given model stays where it is.
        max_batch_size: most completions decoded together (KV cache slots); null: as many as
            ``kv_cache_gib`` holds at ``max_model_len`` each, at most ``MAX_AUTO_BATCH`` (vLLM's
            ``max_num_seqs`` default), so a burst joins one running batch instead of waiting.
        kv_cache_gib: the KV cache's memory budget in GiB when ``max_batch_size`` is null (vLLM's
            ``VLLM_CPU_KVCACHE_SPACE``; the cache grows on demand up to it).
        max_queue_size: most requests waiting for a slot; one more raises ``QueueFullError``.
        max_model_len: longest prompt + completion; null: the model's max_position_embeddings.
        max_prefill_tokens: padded prompt tokens prefilled per scheduler step.
        prefill_chunk_tokens: chunked prefill: a prompt longer than this is prefilled this many
            tokens per scheduler step, between the running batch's decode steps, so that a long
            prompt delays the running streams by one chunk per token rather than by its whole
            prefill (null: every prompt in one step). The default, 256: a
            2048-token prompt on the 512-wide benchmark model (one thread, here) took 3.92 s in
            chunks of 256 against 3.78 s whole (+4 %; 128: +24 %), its longest chunk 0.57 s
            (512: 1.26 s).
        prefix_cache_gib: automatic prefix caching: the keys and values of finished completions, up to
            this many GiB, are kept, and a prompt that begins with one (a conversation's next turn:
            the previous prompt, the reply, then new text) prefills only the rest
            (``prefix_cache.py``); 0: off. Multi-turn rollouts (``rl/episodes.py``) no longer
            prefill the whole conversation every turn.
        logprobs_mode: "raw": log_softmax of the model's logits (as vLLM); "processed": after
            repetition penalty, temperature and top-k/top-p/min-p.
        seed: seeds sampling for requests that carry no seed.
        num_threads: torch intra-op threads (null: leave torch's setting).
        prefill_threads: intra-op threads while prompts are prefilled (null: as decoding). Prefill
            is compute-bound and the batch's other work waits for it anyway, so on a CPU server
            decoding with one thread (the other core free for the HTTP side) and prefilling with
            all cores halves time to first token (measured here: 2 cores, 40 x 32 prompt tokens
            in 194 ms instead of 438 ms).
        linear: the projections' matmul: "auto" (oneDNN with reordered weights on a CPU, for
            float32/bfloat16 models of hidden size >= 384, as vLLM's CPU backend; else torch's),
            "onednn" or "torch"
            (``F.linear``, the model's own numbers bit for bit).
        attention: decode attention: "auto" (on a CPU, for models of hidden size >= 384, batches of
            16 or more sequences run a kernel compiled by ``torch.compile`` at start-up, 1.5-1.8x
            faster than SDPA there (``decode_attention.py``); elsewhere, or where torch.compile
            cannot build it, SDPA), "compiled" (that, or an error) or "sdpa" (SDPA always).
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        path: str | None = None,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        device: str = "auto",
        max_batch_size: AtLeastOne | None = None,
        kv_cache_gib: NonNegativeFloat = 1.0,
        max_queue_size: AtLeastOne = 256,
        max_model_len: AtLeastOne | None = None,
        max_prefill_tokens: AtLeastOne = 4096,
        prefill_chunk_tokens: AtLeastOne | None = 256,
        prefix_cache_gib: NonNegativeFloat = 0.5,
        logprobs_mode: Literal["raw", "processed"] = "raw",
        seed: int = 0,
        num_threads: AtLeastOne | None = None,
        prefill_threads: AtLeastOne | None = None,
        linear: Literal["auto", "onednn", "torch"] = "auto",
        attention: Literal["auto", "compiled", "sdpa"] = "auto",
    ) -> None:
        if (
            (max_batch_size is not None and max_batch_size < 1)
            or max_queue_size < 0
            or max_prefill_tokens < 1
            or (prefill_chunk_tokens is not None and prefill_chunk_tokens < 1)
            or prefix_cache_gib < 0
        ):
            raise ConfigError(
                "engine.max_batch_size, engine.max_prefill_tokens and engine.prefill_chunk_tokens must be "
                ">= 1 (prefill_chunk_tokens null: no chunking), engine.max_queue_size >= 0, "
                "engine.prefix_cache_gib >= 0 (0: off)."
            )
        loaded = model is None
        model, tokenizer = resolve(model, tokenizer, path, dtype, "torch")
        if loaded:
            from toolbox.core.device import resolve_device

            model = model.to(resolve_device(device))
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if prefill_threads is not None and prefill_threads < 1:
            raise ConfigError("engine.prefill_threads must be >= 1 (or null: as decoding).")
        self.model = model
        self.tokenizer = tokenizer
        self.max_model_len = context_length(model, tokenizer, max_model_len)
        if max_batch_size is None:
            max_batch_size = batch_limit(model, self.max_model_len, kv_cache_gib)
        self.max_batch_size = max_batch_size
        self.runner = SlotRunner(
            model, max_batch_size, self.max_model_len, linear=linear, attention=attention
        )
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.batcher = ContinuousBatcher(
            self.runner,
            tokenizer,
            self.eos_ids,
            max_batch_size=max_batch_size,
            max_queue_size=max_queue_size,
            max_prefill_tokens=max_prefill_tokens,
            logprobs_mode=logprobs_mode,
            seed=seed,
            prefill_threads=prefill_threads,
            prefill_chunk_tokens=prefill_chunk_tokens,
            prefix_cache_bytes=int(prefix_cache_gib * 2**30),
        )
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.grammars = Grammars(tokenizer, self.vocab_size, self.eos_ids)

    # requests ----------------------------------------------------------------------------------------
    def _check_prompt(self, ids: list[int]) -> list[int]:
        from toolbox.serving.engine import PromptTooLongError

        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) >= self.max_model_len:
            raise PromptTooLongError(
                f"the prompt has {len(ids)} tokens, but the model's context is {self.max_model_len} "
                f"tokens (prompt + completion); shorten the prompt"
            )
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary (size {self.vocab_size})")
        return ids

    def submit(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams,
        request_id: str | None = None,
        stream: bool = True,
        _bypass_queue_limit: bool = False,
    ) -> RequestHandle:
        """Queue one request (thread-safe); it joins the running batch at the next step.

        Raises ``QueueFullError`` when ``max_queue_size`` requests wait, ``PromptTooLongError`` /
        ``ValueError`` for a prompt or parameters the engine cannot serve. With ``stream=True`` and
        a running event loop, ``async for delta in handle`` yields a ``StreamDelta`` per token.
        """
        check_params([params], self.vocab_size)
        ids = self._check_prompt(self.encode_prompt(prompt))
        matcher = self.grammars.matcher(params.structured) if params.structured is not None else None
        return self.batcher.submit(
            ids, params, request_id, stream, bypass_queue_limit=_bypass_queue_limit, matcher=matcher
        )

    supports_submit = True
    #: its forward computes from the model's weights and never reads the modules' train/eval mode
    #: (no dropout anywhere), so a trainer sharing the model need not switch it to eval to generate
    mode_independent = True

    def submit_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        stream: bool = True,
        queue_limit: bool = True,
    ) -> RequestHandle:
        """The interface's typed submission (see ``InferenceEngine.submit_request``): ``submit``."""
        return self.submit(prompt, params, request_id, stream, _bypass_queue_limit=not queue_limit)

    def submit_requests(
        self,
        requests: Sequence[tuple[str | Sequence[int], SamplingParams]],
        *,
        stream: bool = False,
        queue_limit: bool = True,
    ) -> list[RequestHandle]:
        """Queue them all while the scheduler cannot look at the queue: they join the same step (see
        ``InferenceEngine.submit_requests``). Prompts and parameters are checked first (one grammar
        matcher per parameters object, which the scheduler copies per completion); if the queue
        refuses one, those queued before it are cancelled."""
        matchers: dict[int, Any] = {}
        prepared = []
        for prompt, params in requests:
            if id(params) not in matchers:
                check_params([params], self.vocab_size)
                structured = params.structured
                matchers[id(params)] = self.grammars.matcher(structured) if structured is not None else None
            prepared.append((self._check_prompt(self.encode_prompt(prompt)), params, matchers[id(params)]))
        handles: list[RequestHandle] = []
        try:
            with self.batcher.together():  # one step sees them all, however the threads are scheduled
                for ids, params, matcher in prepared:
                    handles.append(
                        self.batcher.submit(
                            ids, params, None, stream, bypass_queue_limit=not queue_limit, matcher=matcher
                        )
                    )
        except BaseException:
            for h in handles:
                h.cancel()
            raise
        return handles

    def abort(self, request_id: str) -> None:
        """Cancel a request by id (no-op if it already finished)."""
        self.batcher.abort(request_id)

    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]:
        """Generate for every prompt (all are queued at once; the queue limit does not apply)."""
        handles = self.submit_requests([(p, params) for p in prompts], stream=False, queue_limit=False)
        try:
            return [h.result() for h in handles]
        except BaseException:
            for h in handles:
                h.cancel()
            raise

    async def generate_async(
        self, prompt: str | Sequence[int], params: SamplingParams, request_id: str | None = None
    ) -> RequestOutput:
        """Generate for one prompt; cancelling the awaiting task cancels the request."""
        return await self.submit(prompt, params, request_id=request_id, stream=False).wait()

    async def stream(
        self, prompt: str | Sequence[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[StreamDelta]:
        """A ``StreamDelta`` per generated token; closing the iterator early cancels the request."""
        handle = self.submit(prompt, params, request_id=request_id, stream=True)
        try:
            async for delta in handle:
                yield delta
        finally:
            handle.cancel()

    # weights and lifecycle -----------------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Copy new weights into the model in place, between two decode steps.

        Keys are the model's ``state_dict`` names (a ``module.`` or ``_orig_mod.`` prefix from DDP or
        ``torch.compile`` is stripped); a subset is fine (e.g. only the trained parameters).
        """
        with self.batcher.step_lock:
            copy_weights_(self.model, state_dict)
            self.runner.refresh()

    def weights_updated(self) -> None:
        with self.batcher.step_lock:
            self.runner.refresh()

    def stats(self) -> dict[str, int]:
        """``waiting`` and ``running`` requests now, the limits (for a server's metrics), and since the
        start the prompt tokens of the requests prefilled (``prompt_tokens``) and how many of them the
        prefix cache held (``prefix_cache_hit_tokens``: restored, not computed)."""
        return self.batcher.stats()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every request in flight has finished (a server's graceful shutdown)."""
        return self.batcher.drain(timeout)

    def shutdown(self) -> None:
        self.batcher.close()
