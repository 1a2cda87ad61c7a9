"""What every factory that tokenizes records shares: encoding, field access, raw fields, skip reports."""

from __future__ import annotations

import logging

from transformers import PreTrainedTokenizerBase

from toolbox.core.errors import ConfigError, DataError
from toolbox.data.base import DatasetFactory, Example, Record

log = logging.getLogger(__name__)

# raw string fields evaluators and rewards read; kept in every example whose record has them
RAW_FIELDS = ("prompt", "completion", "answer")


class TokenizedFactory(DatasetFactory):
    """Base of the factories here: holds the tokenizer, ``max_length`` and the bos/eos ids.

    Text is encoded without the tokenizer's own special tokens; each factory places bos (when the
    tokenizer has one) and eos itself.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
        if max_length < 2:
            raise ConfigError(f"data.dataset.max_length: {max_length}; set it to 2 or more (bos and eos).")
        if tokenizer.eos_token_id is None:
            raise DataError(
                "the tokenizer has no eos token, so sequences cannot end; use a tokenizer with one "
                "(the char and bpe tokenizers have <|eos|>)."
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.bos: list[int] = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
        self.eos: int = tokenizer.eos_token_id
        self.num_skipped = 0  # examples the last call dropped
        self.num_truncated = 0  # examples the last call shortened

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without bos/eos."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def text(self, record: Record, field: str, index: int, setting: str) -> str:
        """``record[field]`` as a string; a DataError names the record, its keys and the setting to change."""
        value = record.get(field)
        if not isinstance(value, str):
            problem = "has no field" if field not in record else f"has a {type(value).__name__} in field"
            raise DataError(
                f"record {index} {problem} '{field}' (its keys: {', '.join(map(str, record))}); "
                f"set data.dataset.{setting} to the field holding the text."
            )
        return value

    @staticmethod
    def raw(record: Record) -> Example:
        """The raw fields of ``RAW_FIELDS`` the record has."""
        return {k: record[k] for k in RAW_FIELDS if k in record}

    def start(self) -> None:
        """Reset the per-call counters."""
        self.num_skipped = 0
        self.num_truncated = 0

    def report(self, total: int, what: str) -> None:
        """Warn once about the examples this call skipped (``what`` says why) and truncated."""
        name = getattr(type(self), "_registry_name", type(self).__name__)
        if self.num_skipped:
            log.warning(
                "dataset '%s': skipped %d of %d examples whose %s exceeds max_length=%d; "
                "raise data.dataset.max_length to keep them.",
                name,
                self.num_skipped,
                total,
                what,
                self.max_length,
            )
        if self.num_truncated:
            log.info(
                "dataset '%s': truncated %d of %d examples to max_length=%d.",
                name,
                self.num_truncated,
                total,
                self.max_length,
            )

    def left_truncate(self, prompt: list[int], room: int) -> list[int] | None:
        """bos + the last tokens of ``prompt`` that fit in ``room`` tokens; None when no prompt token fits."""
        room -= len(self.bos)
        if room < min(1, len(prompt)):
            return None
        if len(prompt) > room:
            self.num_truncated += 1
            prompt = prompt[len(prompt) - room :]
        return [*self.bos, *prompt]
