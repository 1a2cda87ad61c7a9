"""The one inference interface. RL rollouts (the GRPO trainer) and ``toolbox serve`` both use it.

Backends (registered in ``ENGINES``): ``torch`` (ours: KV cache, batched and continuous batching),
``hf`` (transformers ``generate``), ``vllm`` (in-process ``vllm.LLM``), ``sglang`` (in-process,
GPU only) and ``http`` (any OpenAI-compatible server).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolbox.core.errors import ToolboxError


class EngineError(ToolboxError):
    """A request could not be served; the message says why."""


class QueueFullError(EngineError):
    """The engine's request queue is full: try again later (a server answers 429 or 503)."""


class PromptTooLongError(EngineError, ValueError):
    """The prompt leaves no room for a generated token within the model's context (a server: 400)."""


class GrammarError(EngineError, ValueError):
    """A ``StructuredOutput`` that cannot be compiled (a bad JSON schema or grammar; a server: 400)."""


class EngineClosedError(EngineError):
    """The engine was shut down (or its loop failed) before the request finished."""


@dataclass
class StructuredOutput:
    """What the output must match (constrained decoding): exactly one of the three.

    ``json_object``: any JSON object; ``json_schema``: a JSON value valid under that schema; ``lark``:
    a Lark grammar in llguidance's dialect (``%json {schema}`` embeds a schema), e.g. the tool-call
    format of a chat template.
    """

    json_object: bool = False
    json_schema: dict[str, Any] | None = None
    lark: str | None = None
    field: str = "response_format"  # the request field it comes from, for error messages


@dataclass
class SamplingParams:
    """How to sample. ``temperature=0`` is greedy; ``n`` completions per prompt.

    ``presence_penalty`` / ``frequency_penalty`` (OpenAI's, -2..2) subtract ``presence * [count > 0]
    + frequency * count`` from a token's logit, counting the tokens generated so far; ``logit_bias``
    adds its value (-100..100) to a token id's logit before anything else; ``structured`` restricts
    every step to the tokens that keep the output valid (see ``toolbox/serving/structured.py``).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    n: int = 1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0  # with logprobs: also the k most likely tokens of every step
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    structured: StructuredOutput | None = None


@dataclass
class Completion:
    """One generated sequence."""

    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (eos or a stop string/id), "length", or "abort" (cancelled)
    logprobs: list[float] | None = None  # per token: log_softmax of the model's logits (raw, as vLLM)
    # per token, when params.top_logprobs > 0: the k most likely token ids -> their logprob (as
    # ``logprobs``), most likely first; the chosen token is among them only if it is that likely
    top_logprobs: list[dict[int, float]] | None = None


@dataclass
class RequestOutput:
    """All completions of one prompt."""

    prompt_token_ids: list[int]
    completions: list[Completion]


@dataclass
class StreamDelta:
    """A piece of a streamed completion (``index`` among the ``n`` of a request)."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str | None = None
    logprobs: list[float] | None = None  # one per token in ``token_ids`` when params.logprobs
    top_logprobs: list[dict[int, float]] | None = None  # one per token when params.top_logprobs


class RequestHandle(Protocol):
    """A request queued with :meth:`InferenceEngine.submit_request`: wait, stream or cancel it.

    A handle may also offer ``add_done_callback(fn)`` (the torch engine's do): ``fn(handle)`` runs
    once it has finished, so a caller waiting on many requests sleeps instead of polling ``done``
    (``rl/episodes.py``); and ``add_completion_callback(fn)``: ``fn(handle, index, completion)`` as
    each of its ``n`` completions finishes."""

    request_id: str
    prompt_token_ids: list[int]

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finishes (any thread); its output or the error that ended it."""
        ...

    async def wait(self) -> RequestOutput:
        """Await the output (cancelling the awaiting task cancels the request)."""
        ...

    def __aiter__(self) -> AsyncIterator[StreamDelta]:
        """The deltas as they are generated (handles submitted with ``stream=True`` in a loop)."""
        ...

    def cancel(self) -> None: ...


class InferenceEngine(ABC):
    """Generate from prompts (text or token ids); chat; stream; update weights; shut down."""

    tokenizer: Any
    max_model_len: int | None = None  # longest prompt + completion, where the engine knows it
    model: Any = None  # the in-process model it generates with (None: weights held elsewhere)
    #: whether :meth:`submit_request` queues single requests into a running batch (continuous batching)
    supports_submit: bool = False

    def submit_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        stream: bool = True,
        queue_limit: bool = True,
    ) -> RequestHandle:
        """Queue one request (thread-safe) where ``supports_submit``; it joins the running batch at
        the next step. ``queue_limit=False`` admits it even when the queue is full (a trainer's
        rollout, which waits for all its requests anyway). Raises ``QueueFullError``,
        ``PromptTooLongError`` or ``ValueError`` for a request the engine cannot take now or at all.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no per-request submission (supports_submit is false); use generate"
        )

    def submit_requests(
        self,
        requests: Sequence[tuple[str | Sequence[int], SamplingParams]],
        *,
        stream: bool = False,
        queue_limit: bool = True,
    ) -> list[RequestHandle]:
        """Queue several ``(prompt, params)`` requests at once (thread-safe) where ``supports_submit``:
        one step of the engine sees them all, however the threads are scheduled, so the batch they
        run in, and the numbers its kernels compute (log-probs move with a batch's rows at the
        float rounding), do not depend on thread timing: a trainer's round needs it, its sampling
        log-probs a function of its seeds and weights only. Default: one :meth:`submit_request`
        each, for an engine whose steps cannot see part of them; the torch engine overrides it."""
        return [
            self.submit_request(prompt, params, stream=stream, queue_limit=queue_limit)
            for prompt, params in requests
        ]

    def shares_model(self, model: Any) -> bool:
        """Whether the engine generates with ``model`` itself (then weights need no copying)."""
        return self.model is not None and self.model is model

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """The token ids the engine generates from: text is tokenized (with the tokenizer's specials)."""
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt)["input_ids"])
        return [int(t) for t in prompt]

    @abstractmethod
    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]: ...

    def encode_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The prompt token ids of a conversation: the model's chat template, ready for its reply
        (``tools``: OpenAI tool definitions, for a template that renders them)."""
        kwargs = {"tools": tools} if tools else {}
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **kwargs
        )
        return list(ids["input_ids"]) if isinstance(ids, dict) or hasattr(ids, "keys") else list(ids)

    def chat(
        self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams
    ) -> list[RequestOutput]:
        """Apply the model's chat template to each conversation, then generate."""
        return self.generate([self.encode_chat(c) for c in conversations], params)

    async def generate_async(self, prompt: str | Sequence[int], params: SamplingParams) -> RequestOutput:
        import asyncio

        return (await asyncio.to_thread(self.generate, [prompt], params))[0]

    async def stream(self, prompt: str | Sequence[int], params: SamplingParams) -> AsyncIterator[StreamDelta]:
        """Default: generate whole, then yield each completion as one delta. Engines override."""
        out = await self.generate_async(prompt, params)
        for i, c in enumerate(out.completions):
            yield StreamDelta(i, c.token_ids, c.text, c.finish_reason, c.logprobs, c.top_logprobs)

    def weights_updated(self) -> None:
        """The model this engine shares was changed in place (an optimizer step): drop derived copies.

        Needed because not every in-place write is visible otherwise (torch's fused AdamW does not
        bump parameter version counters). Engines without derived weights ignore it.
        """

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new policy weights in place (RL: after every optimizer step)."""
        raise NotImplementedError(f"{type(self).__name__} cannot update weights in place")

    def stats(self) -> dict[str, int]:
        """Queue depth and batch occupancy where the engine knows them (``waiting``, ``running``)."""
        return {}

    def shutdown(self) -> None:
        pass
