"""A byte-level BPE tokenizer trained locally on the training corpus."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from toolbox.core.errors import ConfigError
from toolbox.core.registries import TOKENIZERS
from toolbox.data.tokenizers.specials import SPECIAL_TOKENS, check_max_length, wrap

BYTE_ALPHABET = 256


@TOKENIZERS.register("bpe")
def bpe(
    corpus: Iterable[str], vocab_size: int = 512, min_frequency: int = 2, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2 style) trained on the corpus; every digit is its own token.

    Digits are split off one by one before the byte-level step, so numbers tokenize consistently
    (otherwise "12" may be one token and "19" two). Any text encodes (no unknown token), and
    training is deterministic: the same corpus gives the same vocabulary and merges.

    Args:
        corpus: the strings to train on (injected: the training split's texts).
        vocab_size: the largest vocabulary, special tokens and the 256 byte symbols included;
            fewer tokens result when the corpus has fewer merges to offer.
        min_frequency: a pair must occur this often to be merged.
        model_max_length: the longest sequence a model takes, saved with the tokenizer.
    """
    check_max_length(model_max_length)
    smallest = BYTE_ALPHABET + len(SPECIAL_TOKENS)
    if vocab_size < smallest:
        raise ConfigError(
            f"tokenizer.vocab_size: {vocab_size} cannot hold the {BYTE_ALPHABET} byte symbols and "
            f"{len(SPECIAL_TOKENS)} special tokens; set tokenizer.vocab_size={smallest} or more."
        )
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(iter(corpus), trainer=trainer)
    return wrap(backend, model_max_length)
