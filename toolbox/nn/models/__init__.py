"""Models registered in ``MODELS``, one per module.

Importing this package registers them; the ``MODELS`` registry does so on its first lookup. Heavy
libraries (transformers) are imported only when a model that needs them is built.

- ``tiny_llama``: a randomly initialised Hugging Face ``LlamaForCausalLM`` built from a config.
- ``pretrained``: any causal LM ``AutoModelForCausalLM`` can load from a local directory or hub id.
- ``transformer_lm``: our own small causal LM whose norm, attention and feed-forward are layer specs.
- ``mlp_classifier``: an MLP from features to class logits.
- ``actor_critic``: actor and critic MLPs for gymnasium environments (PPO).
"""

from toolbox.nn.models import actor_critic, mlp_classifier, pretrained, tiny_llama, transformer_lm

__all__ = ["actor_critic", "mlp_classifier", "pretrained", "tiny_llama", "transformer_lm"]
