"""``http``: any OpenAI-compatible server (vLLM, SGLang, ``toolbox serve``) behind the engine interface.

``generate`` posts one ``/completions`` request per prompt (``max_concurrency`` at a time), ``chat``
posts to ``/chat/completions``, ``stream`` reads the server-sent events of ``"stream": true``. Failed
connections, timeouts and 429/5xx answers are retried with exponential backoff
(``toolbox.core.retry``); other 4xx answers raise ``RemoteError`` with the server's message at once.

The OpenAI API knows temperature, top_p, n, seed, stop, max_tokens and logprobs. The parameters
beyond it (top_k, min_p, repetition_penalty, stop_token_ids, ignore_eos) and ``return_token_ids``
(the generated ids, not only text) are vLLM/SGLang extensions, sent when ``extensions`` is on; with
it off, a non-default extension parameter is an error, and token ids come from re-tokenizing the
text with the local tokenizer (if one is given).

Top-k log-probs (``params.top_logprobs = k > 0``, with ``logprobs``) are asked for as the APIs name
them: completions ``"logprobs": k`` (OpenAI allows at most 5, vLLM up to its ``--max-logprobs``; a
server's refusal comes back as ``RemoteError``), chat ``"logprobs": true, "top_logprobs": k``. The
answer names tokens by their text; with ``extensions`` on the request also carries vLLM's
``"return_tokens_as_token_ids": true``, so that they come back as ``"token_id:N"``, and without it
(or from a server that ignores it) each text is mapped to the one id the local tokenizer encodes it
to (an error naming the token where there is no tokenizer or it gives not exactly one id). A step's
alternatives are sorted most likely first and cut to k: the completions API adds the chosen token
to them when it is not among the k, and vLLM lists the chosen token first. (vLLM 0.32's chat answer
holds the chosen token and only k - 1 others, so where sampling chose a token outside the k most
likely, the k-th is missing there and the chosen one takes its place: with ``extensions`` on, chat
asks for k + 1, up to 20, and keeps the best k.)

Why this file is longer than ~400 lines: the OpenAI wire format in both directions (request bodies,
log-prob objects of two APIs, SSE streams, retries) is one adapter; its halves only make sense
together.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt, PositiveFloat
from toolbox.core.registries import ENGINES
from toolbox.core.retry import retry
from toolbox.serving.engine import (
    Completion,
    EngineError,
    InferenceEngine,
    RequestOutput,
    SamplingParams,
    StreamDelta,
)
from toolbox.serving.sampling import check_params

MAX_CHAT_TOP_LOGPROBS = 20  # the chat API's (OpenAI's, vLLM's and ours) largest top_logprobs
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class RemoteError(EngineError):
    """The server answered with an error status (after retries, for the retryable ones)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"server answered {status}: {message}")
        self.status = status


class _Retryable(Exception):
    """A transient failure worth another try."""


def _error_message(body: bytes | str) -> str:
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    except ValueError:
        return text[:500]


@ENGINES.register("http")
class HTTPEngine(InferenceEngine):
    """A client of an OpenAI-compatible server.

    Args:
        base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        model_name: the ``model`` of every request; null: the first one ``GET /models`` lists.
        api_key: sent as ``Authorization: Bearer ...`` (null: none).
        tokenizer: the model's tokenizer (injected, optional): chat templates, token ids without
            the extensions, ``encode_prompt``.
        path: a tokenizer folder written by ``save_pretrained`` (when no tokenizer is injected).
        timeout: seconds one request may take (reading a whole completion, or between two events
            of a stream).
        connect_timeout: seconds to open a connection.
        max_retries: attempts per request, the first included.
        retry_delay: seconds before the second attempt; doubled after every failure.
        max_retry_delay: upper bound on one wait between attempts.
        max_concurrency: requests in flight at once in ``generate``.
        extensions: send vLLM/SGLang's extra parameters (top_k, min_p, repetition_penalty,
            stop_token_ids, ignore_eos, return_token_ids, and return_tokens_as_token_ids with
            top_logprobs).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000/v1",
        model_name: str | None = None,
        api_key: str | None = None,
        tokenizer: Any = None,
        path: str | None = None,
        timeout: PositiveFloat = 120.0,
        connect_timeout: PositiveFloat = 10.0,
        max_retries: NonNegativeInt = 4,
        retry_delay: NonNegativeFloat = 0.5,
        max_retry_delay: NonNegativeFloat = 8.0,
        max_concurrency: AtLeastOne = 16,
        extensions: bool = True,
    ) -> None:
        import httpx

        if tokenizer is None and path is not None:
            from toolbox.core.registries import TOKENIZERS

            tokenizer = TOKENIZERS.build({"name": "hf_tokenizer", "path": path}, path="engine.path")
        self.tokenizer = tokenizer
        self.base_url = base_url.rstrip("/")
        self.extensions = extensions
        self.max_concurrency = max(1, max_concurrency)
        self.max_retries = max(1, max_retries)
        self.retry_delay, self.max_retry_delay = retry_delay, max_retry_delay
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=self._timeout, headers=self._headers)
        self._model_name = model_name
        self._text_ids: dict[str, list[int]] = {}  # token text -> its ids (top_logprobs without extensions)
        self._retry = retry(
            attempts=self.max_retries,
            base_delay=retry_delay,
            max_delay=max_retry_delay,
            exceptions=(_Retryable,),
        )

    # plumbing ------------------------------------------------------------------------------------
    def _request(self, method: str, route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx

        def once() -> dict[str, Any]:
            try:
                response = self._client.request(method, f"{self.base_url}{route}", json=body)
            except httpx.TransportError as e:  # connection refused/reset, timeouts
                raise _Retryable(f"{type(e).__name__}: {e}") from e
            if response.status_code in RETRY_STATUS:
                raise _Retryable(f"{response.status_code}: {_error_message(response.content)}")
            if response.status_code >= 400:
                raise RemoteError(response.status_code, _error_message(response.content))
            return response.json()

        try:
            return self._retry(once)()
        except _Retryable as e:
            raise EngineError(
                f"{method} {self.base_url}{route} failed after {self.max_retries} attempts: {e}"
            ) from e

    @property
    def model_name(self) -> str:
        if self._model_name is None:
            models = self._request("GET", "/models").get("data", [])
            if not models:
                raise EngineError(f"{self.base_url}/models lists no model; set engine.model_name")
            self._model_name = str(models[0]["id"])
            if models[0].get("max_model_len"):
                self.max_model_len = int(models[0]["max_model_len"])
        return self._model_name

    def _body(self, params: SamplingParams) -> dict[str, Any]:
        check_params([params])
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.presence_penalty:
            body["presence_penalty"] = params.presence_penalty
        if params.frequency_penalty:
            body["frequency_penalty"] = params.frequency_penalty
        if params.logit_bias:
            body["logit_bias"] = {str(k): v for k, v in params.logit_bias.items()}
        if params.structured is not None:
            body["response_format"] = _response_format(params.structured)
        extra = {
            "top_k": (params.top_k, 0),
            "min_p": (params.min_p, 0.0),
            "repetition_penalty": (params.repetition_penalty, 1.0),
            "stop_token_ids": (list(params.stop_token_ids), []),
            "ignore_eos": (params.ignore_eos, False),
        }
        for key, (value, default) in extra.items():
            if value != default:
                if not self.extensions:
                    raise ValueError(
                        f"{key}={value!r} is not part of the OpenAI API; build the http engine with "
                        f"extensions=true (vLLM and SGLang servers accept it)"
                    )
                body[key] = value
        if self.extensions:
            body["return_token_ids"] = True
        return body

    def _logprobs_fields(self, body: dict[str, Any], params: SamplingParams, chat: bool) -> None:
        """Ask for the chosen tokens' log-probs and, with ``params.top_logprobs``, the top k."""
        if not params.logprobs:
            return
        k = params.top_logprobs
        if k and not self.extensions and self.tokenizer is None:
            raise ValueError(
                "top_logprobs through the http engine without extensions needs the model's tokenizer "
                "(engine.path) to map the tokens the server names to ids; or build it with "
                "extensions=true (vLLM then answers token ids)"
            )
        if chat:
            body["logprobs"] = True
            if k:  # one more from vLLM, whose chat answer may hold only k - 1 besides the chosen one
                body["top_logprobs"] = min(k + 1, MAX_CHAT_TOP_LOGPROBS) if self.extensions else k
        else:
            body["logprobs"] = k if k else (0 if self.extensions else 1)
        if k and self.extensions:
            body["return_tokens_as_token_ids"] = True

    def _token_id(self, token: str) -> int:
        """The id of a token the server named: ``token_id:N`` (vLLM's extension), else its text."""
        if self.extensions and token.startswith("token_id:") and token[9:].isdigit():
            return int(token[9:])
        ids = self._text_ids.get(token)
        if ids is None:
            if self.tokenizer is None:
                raise EngineError(
                    f"the server named the token {token!r} by its text, and the http engine has no "
                    "tokenizer to map it to an id; set engine.path, or use extensions=true with a server "
                    "that honours return_tokens_as_token_ids (vLLM)"
                )
            ids = self._text_ids[token] = list(self.tokenizer(token, add_special_tokens=False)["input_ids"])
        if len(ids) != 1:
            raise EngineError(
                f"the server named the token {token!r} by its text, and the local tokenizer encodes it "
                f"to {len(ids)} ids {ids}, not one; build the http engine with extensions=true (vLLM "
                "then answers token ids)"
            )
        return ids[0]

    def _top(self, pairs: Any, k: int) -> dict[int, float]:
        """(token, logprob) pairs of one step -> the k most likely ids -> logprob, most likely first."""
        ranked = sorted(((self._token_id(t), float(v)) for t, v in pairs), key=lambda p: -p[1])
        top: dict[int, float] = {}
        for token_id, logprob in ranked:
            if len(top) < k:
                top.setdefault(token_id, logprob)  # two texts of one id: keep the likelier
        return top

    def _top_logprobs(self, lp: dict[str, Any], k: int, chat: bool) -> list[dict[int, float]]:
        """``Completion.top_logprobs`` from an answer's ``logprobs`` object."""
        if chat:
            return [
                self._top(((a["token"], a["logprob"]) for a in entry.get("top_logprobs") or []), k)
                for entry in lp.get("content") or []
            ]
        return [self._top((step or {}).items(), k) for step in lp.get("top_logprobs") or []]

    def _completion(self, choice: dict[str, Any], params: SamplingParams, chat: bool) -> Completion:
        text = (choice["message"].get("content") or "") if chat else choice.get("text", "")
        ids = choice.get("token_ids")
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if self.tokenizer else []
        logprobs = top_logprobs = None
        if params.logprobs and choice.get("logprobs"):
            lp = choice["logprobs"]
            if chat:
                logprobs = [float(entry["logprob"]) for entry in lp.get("content") or []]
            else:
                logprobs = [float(x) for x in lp.get("token_logprobs") or []]
            if params.top_logprobs:
                top_logprobs = self._top_logprobs(lp, params.top_logprobs, chat)
        return Completion(
            token_ids=[int(t) for t in ids],
            text=text,
            finish_reason=choice.get("finish_reason") or "length",
            logprobs=logprobs,
            top_logprobs=top_logprobs,
        )

    def _output(
        self, data: dict[str, Any], prompt_ids: list[int], params: SamplingParams, chat: bool
    ) -> RequestOutput:
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if not prompt_ids and choices and choices[0].get("prompt_token_ids"):
            prompt_ids = [int(t) for t in choices[0]["prompt_token_ids"]]
        if not prompt_ids and data.get("prompt_token_ids"):
            prompt_ids = [int(t) for t in data["prompt_token_ids"]]
        return RequestOutput(prompt_ids, [self._completion(c, params, chat) for c in choices])

    def _prompt(self, prompt: str | Sequence[int]) -> tuple[str | list[int], list[int]]:
        if isinstance(prompt, str):
            return prompt, (self.encode_prompt(prompt) if self.tokenizer is not None else [])
        ids = [int(t) for t in prompt]
        return ids, ids

    def _completion_body(self, prompt: str | Sequence[int], params: SamplingParams) -> tuple[dict, list[int]]:
        sent, ids = self._prompt(prompt)
        body = self._body(params)
        body["prompt"] = sent
        self._logprobs_fields(body, params, chat=False)
        return body, ids

    # the interface -------------------------------------------------------------------------------
    def generate_one(self, prompt: str | Sequence[int], params: SamplingParams) -> RequestOutput:
        body, ids = self._completion_body(prompt, params)
        return self._output(self._request("POST", "/completions", body), ids, params, chat=False)

    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]:
        self.model_name  # noqa: B018  (resolve once, before the threads)
        if len(prompts) <= 1:
            return [self.generate_one(p, params) for p in prompts]
        with ThreadPoolExecutor(min(self.max_concurrency, len(prompts))) as pool:
            return list(pool.map(lambda p: self.generate_one(p, params), prompts))

    def chat(
        self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams
    ) -> list[RequestOutput]:
        """``/chat/completions``: the server applies its chat template."""

        def one(messages: list[dict[str, str]]) -> RequestOutput:
            body = self._body(params)
            body["messages"] = messages
            self._logprobs_fields(body, params, chat=True)
            return self._output(self._request("POST", "/chat/completions", body), [], params, chat=True)

        self.model_name  # noqa: B018
        with ThreadPoolExecutor(max(1, min(self.max_concurrency, len(conversations)))) as pool:
            return list(pool.map(one, conversations))

    async def generate_async(self, prompt: str | Sequence[int], params: SamplingParams) -> RequestOutput:
        import httpx

        body, ids = self._completion_body(prompt, params)
        async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
            for attempt in range(self.max_retries):
                try:
                    response = await client.post(f"{self.base_url}/completions", json=body)
                    if response.status_code not in RETRY_STATUS:
                        break
                    failure = f"{response.status_code}: {_error_message(response.content)}"
                except httpx.TransportError as e:
                    failure = f"{type(e).__name__}: {e}"
                if attempt == self.max_retries - 1:
                    raise EngineError(
                        f"POST {self.base_url}/completions failed after {self.max_retries} attempts: {failure}"
                    )
                await asyncio.sleep(self._delay(attempt))
            if response.status_code >= 400:
                raise RemoteError(response.status_code, _error_message(response.content))
            return self._output(response.json(), ids, params, chat=False)

    async def stream(self, prompt: str | Sequence[int], params: SamplingParams) -> AsyncIterator[StreamDelta]:
        """Server-sent events of ``"stream": true``; a connection is retried until the first event."""
        import httpx

        body, _ = self._completion_body(prompt, params)
        body["stream"] = True
        async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
            for attempt in range(self.max_retries):
                try:
                    async with client.stream("POST", f"{self.base_url}/completions", json=body) as response:
                        if response.status_code in RETRY_STATUS:
                            failure = f"{response.status_code}: {_error_message(await response.aread())}"
                        elif response.status_code >= 400:
                            raise RemoteError(response.status_code, _error_message(await response.aread()))
                        else:
                            async for delta in self._events(response, params):
                                yield delta
                            return
                except httpx.TransportError as e:
                    failure = f"{type(e).__name__}: {e}"
                if attempt == self.max_retries - 1:
                    raise EngineError(
                        f"POST {self.base_url}/completions failed after {self.max_retries} attempts: {failure}"
                    )
                await asyncio.sleep(self._delay(attempt))

    async def _events(self, response: Any, params: SamplingParams) -> AsyncIterator[StreamDelta]:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[len("data:") :].strip()
            if payload == "[DONE]":
                return
            data = json.loads(payload)
            if "error" in data:
                raise RemoteError(int(data["error"].get("code") or 500), _error_message(payload))
            for choice in data.get("choices", []):
                text = choice.get("text", "")
                ids = choice.get("token_ids")
                if ids is None:
                    ids = (
                        list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
                        if self.tokenizer
                        else []
                    )
                logprobs = top_logprobs = None
                if params.logprobs and choice.get("logprobs"):
                    logprobs = [float(x) for x in choice["logprobs"].get("token_logprobs") or []]
                    if params.top_logprobs:
                        top_logprobs = self._top_logprobs(choice["logprobs"], params.top_logprobs, chat=False)
                yield StreamDelta(
                    int(choice.get("index", 0)),
                    [int(t) for t in ids],
                    text,
                    choice.get("finish_reason"),
                    logprobs,
                    top_logprobs,
                )

    def _delay(self, attempt: int) -> float:
        return min(self.max_retry_delay, self.retry_delay * 2**attempt) * (1 + 0.1 * random.random())

    def shutdown(self) -> None:
        self._client.close()


def _response_format(spec: Any) -> dict[str, Any]:
    """The OpenAI ``response_format`` of a ``StructuredOutput`` (a grammar has none: a 400)."""
    if spec.json_object:
        return {"type": "json_object"}
    if spec.json_schema is not None:
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": spec.json_schema}}
    raise ValueError(
        f"{spec.field}: the http engine can send a JSON schema, not a grammar; use engine=torch for it"
    )
