"""Models registered in ``MODELS``, one per module.

Importing this package registers them; the ``MODELS`` registry does so on its first lookup. Heavy
libraries (transformers) are imported only when a model that needs them is built.

- ``tiny_llama``: a randomly initialised Hugging Face ``LlamaForCausalLM`` built from a config.
- ``hf_causal_lm`` (``hf_random_init``): a randomly initialised Hugging Face causal LM of any common family (llama, mistral,
  qwen2, qwen3, gemma, gpt2) built from its own config class.
- ``pretrained``: any causal LM ``AutoModelForCausalLM`` can load from a local directory or hub id.
- ``transformer_lm``: our own small causal LM whose norm, attention and feed-forward are layer specs.
- ``mlp_classifier``: an MLP from features to class logits.
- ``gnn``: graph convolutions (``graph_conv`` layer specs) with a node, edge or graph head (PyG).
- ``actor_critic``: actor and critic MLPs for gymnasium environments (PPO).
"""

from toolbox.nn.models import (
    actor_critic,
    gnn,
    hf_random_init,
    mlp_classifier,
    pretrained,
    tiny_llama,
    transformer_lm,
)

__all__ = [
    "actor_critic",
    "gnn",
    "hf_random_init",
    "mlp_classifier",
    "pretrained",
    "tiny_llama",
    "transformer_lm",
]
