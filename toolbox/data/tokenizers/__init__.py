"""Tokenizers (``TOKENIZERS``): every one returns a ``transformers.PreTrainedTokenizerFast``.

- ``char``: one token per character of the training corpus (tiny vocabularies for toy tasks).
- ``bpe``: a byte-level BPE trained locally on the training corpus.
- ``pretrained``: a tokenizer saved with ``save_pretrained`` (or a hub id, where the hub is reachable).

The builder injects ``corpus`` (the strings of the training split) into those that train on it.
The ones trained here share the special tokens and chat template of ``specials``: ``<|bos|>`` is
added in front of ``tokenizer(text)``, ``padding_side`` is ``"left"`` (for generation), and
``save_pretrained`` + ``AutoTokenizer.from_pretrained`` give back the same tokenizer.
"""

from toolbox.data.tokenizers import bpe, char, pretrained  # noqa: F401  (registers the tokenizers)
