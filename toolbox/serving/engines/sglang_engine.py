"""``sglang``: in-process ``sglang.Engine`` (the optional ``sglang`` package; CUDA GPUs only).

SGLang's kernels are CUDA-only, so this adapter runs where a GPU is; elsewhere reach an SGLang
server through the ``http`` engine. Prompts go in as token ids (our tokenizer), ``n`` completions as
``n`` copies of the prompt (each with its own derived seed when the request has one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from toolbox.core.bounds import AtLeastOne, PositiveFraction
from toolbox.core.errors import ConfigError
from toolbox.core.registries import ENGINES
from toolbox.serving.engine import (
    Completion,
    InferenceEngine,
    PromptTooLongError,
    RequestOutput,
    SamplingParams,
)
from toolbox.serving.engines.loading import save_for_server
from toolbox.serving.engines.torch.scheduler import completion_seed
from toolbox.serving.sampling import check_params

INSTALL_HINT = (
    "engine 'sglang' needs the sglang package and a CUDA GPU: `pip install \"sglang[all]\"` on a GPU "
    "machine. Without a GPU, start SGLang elsewhere and use engine=http."
)


def import_sglang() -> Any:
    try:
        import sglang
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    return sglang


@ENGINES.register("sglang")
class SGLangEngine(InferenceEngine):
    """``sglang.Engine`` behind the engine interface.

    Args:
        model: a transformers causal LM (injected); saved to a temporary folder for SGLang.
        tokenizer: its tokenizer (injected).
        path: a folder written by ``save_pretrained`` (needed when no model is given).
        dtype: SGLang's ``dtype``.
        max_model_len: SGLang's ``context_length`` (null: the model's).
        mem_fraction_static: fraction of GPU memory for weights and KV cache.
        seed: SGLang's ``random_seed``.
        extra: more keyword arguments for ``sglang.Engine``.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        path: str | None = None,
        dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto",
        max_model_len: AtLeastOne | None = None,
        mem_fraction_static: PositiveFraction = 0.5,
        seed: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        sglang = import_sglang()
        if path is None:
            if model is None or tokenizer is None:
                raise ConfigError(
                    "engine 'sglang' needs engine.path, or model= and tokenizer= to save for it."
                )
            path = save_for_server(model, tokenizer)
        if tokenizer is None:
            from toolbox.core.registries import TOKENIZERS

            tokenizer = TOKENIZERS.build({"name": "hf_tokenizer", "path": path}, path="engine.path")
        self.tokenizer, self.path = tokenizer, path
        kwargs: dict[str, Any] = {
            "model_path": path,
            "dtype": dtype,
            "mem_fraction_static": mem_fraction_static,
            "random_seed": seed,
            "log_level": "error",
        }
        if max_model_len is not None:
            kwargs["context_length"] = max_model_len
        kwargs.update(extra or {})
        self.engine = sglang.Engine(**kwargs)
        self.max_model_len = max_model_len

    def _params(self, params: SamplingParams, index: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_new_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "min_p": params.min_p,
            "repetition_penalty": params.repetition_penalty,
            "stop": list(params.stop) or None,
            "stop_token_ids": list(params.stop_token_ids) or None,
            "ignore_eos": params.ignore_eos,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
        }
        if params.logit_bias:
            out["logit_bias"] = {str(k): v for k, v in params.logit_bias.items()}
        spec = params.structured
        if spec is not None:  # SGLang's own constrained decoding takes a JSON schema as text
            if spec.lark is not None:
                raise ValueError(
                    f"{spec.field}: engine sglang takes JSON schemas, not grammars; use engine=torch"
                )
            out["json_schema"] = json.dumps(
                spec.json_schema if spec.json_schema is not None else {"type": "object"}
            )
        seed = completion_seed(params.seed, index)
        if seed is not None:
            out["sampling_seed"] = seed
        return out

    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]:
        check_params([params])
        ids = [self.encode_prompt(p) for p in prompts]
        for p in ids:
            if not p:
                raise ValueError("the prompt is empty: give at least one token")
            if self.max_model_len is not None and len(p) >= self.max_model_len:
                raise PromptTooLongError(
                    f"the prompt has {len(p)} tokens, but the model's context is {self.max_model_len} tokens"
                )
        flat_ids = [p for p in ids for _ in range(params.n)]
        flat_params = [self._params(params, j) for _ in ids for j in range(params.n)]
        outs = self.engine.generate(
            input_ids=flat_ids, sampling_params=flat_params, return_logprob=params.logprobs
        )
        results = []
        for i, prompt in enumerate(ids):
            completions = [self._completion(outs[i * params.n + j], params) for j in range(params.n)]
            results.append(RequestOutput(prompt, completions))
        return results

    @staticmethod
    def _completion(out: dict[str, Any], params: SamplingParams) -> Completion:
        meta = out.get("meta_info", {})
        reason = meta.get("finish_reason") or {}
        reason = reason.get("type", "length") if isinstance(reason, dict) else str(reason)
        logprobs = None
        if params.logprobs:
            logprobs = [float(entry[0]) for entry in meta.get("output_token_logprobs", [])]
        return Completion(
            token_ids=list(out.get("output_ids", [])),
            text=out.get("text", ""),
            finish_reason="stop" if reason in ("stop", "eos") else reason,
            logprobs=logprobs,
        )

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """``sglang.Engine.update_weights_from_tensor`` with HF-named tensors."""
        named = [
            (k.removeprefix("module.").removeprefix("_orig_mod."), v.detach()) for k, v in state_dict.items()
        ]
        self.engine.update_weights_from_tensor(named_tensors=named)

    def shutdown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
            self.engine = None
