"""A character tokenizer: one token per character seen in the training corpus."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from toolbox.core.errors import DataError
from toolbox.core.registries import TOKENIZERS
from toolbox.data.tokenizers.specials import SPECIAL_TOKENS, UNK, check_max_length, wrap


@TOKENIZERS.register("char")
def char(corpus: Iterable[str], model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """One token per distinct character of the corpus (sorted, so the vocabulary is deterministic).

    The special tokens come first (pad 0, bos 1, eos 2, unk 3, role markers), then the characters
    in code-point order. A character absent from the corpus encodes as ``<|unk|>``; decoding joins
    the characters without spaces.

    Args:
        corpus: the strings to collect characters from (injected: the training split's texts).
        model_max_length: the longest sequence a model takes, saved with the tokenizer.
    """
    check_max_length(model_max_length)
    chars: set[str] = set()
    for text in corpus:
        chars.update(text)
    if not chars:
        raise DataError(
            "tokenizer 'char': the training corpus holds no text; check data.source (its train split is empty)."
        )
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *sorted(chars)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return wrap(backend, model_max_length)
