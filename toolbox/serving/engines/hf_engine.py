"""``hf``: transformers ``generate``, the reference engine (any causal LM transformers can load).

Prompts are generated in left-padded batches of ``batch_size``. Sampling parameters map onto a
``GenerationConfig``: ``n`` onto ``num_return_sequences``, stop ids onto ``eos_token_id``, stop
strings onto ``stop_strings`` (the text is then cut before the stop string, as the other engines do),
``logit_bias``, presence/frequency penalties and constrained decoding (``structured``) onto a logits
processor that runs the shared sampler's code (``sampling.py``, ``structured.py``),
logprobs onto ``output_logits`` (raw logits, as the torch and vLLM engines report them), a seed onto
a forked torch RNG. A ``seed`` makes the batch reproducible, not each prompt independent of the
others in its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from toolbox.core.bounds import AtLeastOne
from toolbox.core.registries import ENGINES
from toolbox.serving.engine import (
    Completion,
    InferenceEngine,
    PromptTooLongError,
    RequestOutput,
    SamplingParams,
)
from toolbox.serving.engines.detokenize import cut_at_stop
from toolbox.serving.engines.loading import context_length, copy_weights_, eos_token_ids, resolve
from toolbox.serving.sampling import SamplingTensors, apply_logit_bias, apply_output_penalties, check_params
from toolbox.serving.structured import Grammars, allowed_tokens


@ENGINES.register("hf")
class HFEngine(InferenceEngine):
    """transformers ``model.generate`` behind the engine interface.

    Args:
        model: a transformers causal LM (injected); None to load it from ``path``.
        tokenizer: its tokenizer (injected); None to load it from ``path``.
        path: a folder written by ``save_pretrained`` holding the model and the tokenizer.
        dtype: dtype of a model loaded from ``path``.
        device: where a model loaded from ``path`` goes ("auto": a GPU if one is visible; injected by
            a run). A given model stays where it is.
        batch_size: prompts per ``generate`` call (left-padded together).
        max_model_len: longest prompt + completion; null: the model's max_position_embeddings.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        path: str | None = None,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        device: str = "auto",
        batch_size: AtLeastOne = 32,
        max_model_len: AtLeastOne | None = None,
    ) -> None:
        loaded = model is None
        model, tokenizer = resolve(model, tokenizer, path, dtype, "hf")
        if loaded:
            from toolbox.core.device import resolve_device

            model = model.to(resolve_device(device))
        self.model, self.tokenizer = model, tokenizer
        self.batch_size = max(1, batch_size)
        self.max_model_len = context_length(model, tokenizer, max_model_len)
        self.eos_ids = eos_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids, default=0)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.grammars = Grammars(tokenizer, self.vocab_size, self.eos_ids)

    def _config(self, params: SamplingParams, prompt_len: int) -> Any:
        from transformers import GenerationConfig

        stop_ids = sorted(set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_ids)))
        sample = params.temperature > 0
        return GenerationConfig(
            max_new_tokens=min(params.max_tokens, self.max_model_len - prompt_len),
            do_sample=sample,
            temperature=params.temperature if sample else None,
            top_k=params.top_k if sample and params.top_k > 0 else None,
            top_p=params.top_p if sample and params.top_p < 1.0 else None,
            min_p=params.min_p if sample and params.min_p > 0 else None,
            repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1.0 else None,
            num_return_sequences=params.n,
            eos_token_id=stop_ids or [],  # [] (ignore_eos): not the model's own default
            pad_token_id=self.pad_id,
            stop_strings=list(params.stop) or None,
            output_logits=params.logprobs,
            return_dict_in_generate=True,
        )

    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]:
        check_params([params], self.vocab_size)
        if params.structured is not None:
            self.grammars.matcher(params.structured)  # a bad schema fails before any work
        ids = [self.encode_prompt(p) for p in prompts]
        for p in ids:
            if not p:
                raise ValueError("the prompt is empty: give at least one token")
            if len(p) >= self.max_model_len:
                raise PromptTooLongError(
                    f"the prompt has {len(p)} tokens, but the model's context is {self.max_model_len} tokens"
                )
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.inference_mode():
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                outputs: list[RequestOutput] = []
                for start in range(0, len(ids), self.batch_size):
                    outputs.extend(self._batch(ids[start : start + self.batch_size], params))
        finally:
            self.model.train(was_training)
        return outputs

    def _batch(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestOutput]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        config = self._config(params, width)
        processors = None
        if params.logit_bias or params.presence_penalty or params.frequency_penalty or params.structured:
            from transformers import LogitsProcessorList

            processors = LogitsProcessorList([_SharedProcessor(self, params, width)])
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            generation_config=config,
            tokenizer=self.tokenizer if params.stop else None,
            logits_processor=processors,
        )
        new = out.sequences[:, width:].tolist()
        logprobs = tops = None
        if params.logprobs:
            steps = torch.stack(out.logits, dim=1).float().log_softmax(-1)  # [rows, steps, V]
            chosen = out.sequences[:, width:].to(steps.device)
            logprobs = steps.gather(2, chosen.unsqueeze(-1)).squeeze(-1).tolist()
            if params.top_logprobs:
                values, ids = steps.topk(min(params.top_logprobs, steps.shape[-1]), dim=-1)
                tops = [
                    [dict(zip(i, v, strict=True)) for i, v in zip(row_ids, row_values, strict=True)]
                    for row_ids, row_values in zip(ids.tolist(), values.tolist(), strict=True)
                ]
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_ids))
        results = []
        for i, prompt in enumerate(prompts):
            completions = []
            for j in range(params.n):
                row = i * params.n + j
                completion = self._completion(
                    new[row], None if logprobs is None else logprobs[row], stop_ids, params
                )
                if tops is not None:
                    completion.top_logprobs = tops[row][: len(completion.token_ids)]
                completions.append(completion)
            results.append(RequestOutput(list(prompt), completions))
        return results

    def _completion(
        self, tokens: list[int], logprobs: list[float] | None, stop_ids: set[int], params: SamplingParams
    ) -> Completion:
        finish = "length"
        for k, t in enumerate(tokens):  # rows that ended early are padded after their stop id
            if t in stop_ids:
                tokens, finish = tokens[: k + 1], "stop"
                break
        body = tokens[:-1] if finish == "stop" else tokens
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        if params.stop:
            text, hit = cut_at_stop(text, params.stop)
            if hit:
                finish = "stop"
                tokens = self._trim_to_stop_string(tokens, params.stop)
        return Completion(
            token_ids=tokens,
            text=text,
            finish_reason=finish,
            logprobs=None if logprobs is None else logprobs[: len(tokens)],
        )

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Copy new weights into the model in place (names as in its ``state_dict``)."""
        copy_weights_(self.model, state_dict)

    def _trim_to_stop_string(self, tokens: list[int], stop: Sequence[str]) -> list[int]:
        """The shortest prefix of ``tokens`` whose text holds a stop string (rows run on after it)."""
        for k in range(1, len(tokens) + 1):
            if cut_at_stop(self.tokenizer.decode(tokens[:k], skip_special_tokens=True), stop)[1]:
                return tokens[:k]
        return tokens


class _SharedProcessor:
    """A transformers logits processor running the shared sampler's logit bias, presence/frequency
    penalties and grammar masks, so the hf engine honours them as the torch engine does. Each row
    walks its own matcher; a row whose grammar is complete may only end (eos)."""

    def __init__(self, engine: HFEngine, params: SamplingParams, width: int) -> None:
        self.engine, self.params, self.width = engine, params, width
        self.tensors: SamplingTensors | None = None
        self.matchers: list[Any] | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = scores.shape[0]
        if self.tensors is None:
            self.tensors = SamplingTensors.from_params([self.params] * rows, device=scores.device)
            if self.params.structured is not None:
                self.matchers = [self.engine.grammars.matcher(self.params.structured) for _ in range(rows)]
        generated = input_ids[:, self.width :].tolist()
        t = self.tensors
        out = apply_logit_bias(scores.float(), t.logit_bias)
        if t.any_output_penalty:
            out = apply_output_penalties(out, generated, t.presence_penalty, t.frequency_penalty)
        if self.matchers is not None:
            eos = sorted(self.engine.eos_ids)
            if generated and generated[0]:
                for m, row in zip(self.matchers, generated, strict=True):
                    if not (m.is_stopped() or m.is_error()):
                        m.consume_token(row[-1])
            allowed = allowed_tokens(self.matchers, out.shape[-1], out.device)
            assert allowed is not None
            for r, m in enumerate(self.matchers):
                if m.is_stopped() or m.is_error():
                    allowed[r] = False
                    allowed[r, eos] = True
            out = out.masked_fill(~allowed, float("-inf"))
        return out.to(scores.dtype)
