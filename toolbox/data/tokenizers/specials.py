"""The special tokens and chat template of the tokenizers trained here, and the transformers wrapper.

Ids are fixed by the order of ``SPECIAL_TOKENS``: pad 0, bos 1, eos 2, unk 3, then the role markers.
A conversation renders as ``<|bos|><|user|>text<|eos|><|assistant|>text<|eos|>``; with
``add_generation_prompt=True`` it ends in ``<|assistant|>``, so a model's turn ends at eos.
"""

from __future__ import annotations

from tokenizers import Tokenizer, processors
from transformers import PreTrainedTokenizerFast

from toolbox.core.errors import ConfigError

PAD = "<|pad|>"
BOS = "<|bos|>"
EOS = "<|eos|>"
UNK = "<|unk|>"
ROLES = ("system", "user", "assistant", "tool")
ROLE_TOKENS = tuple(f"<|{role}|>" for role in ROLES)
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}{% if eos_token %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def check_max_length(model_max_length: int) -> None:
    if model_max_length < 2:
        raise ConfigError(
            f"tokenizer.model_max_length: {model_max_length} leaves no room for bos and eos; set it to at least 2."
        )


def wrap(backend: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` whose vocabulary holds ``SPECIAL_TOKENS`` for transformers.

    Adds a post-processor that puts bos in front of every encoded text; padding side, maximum length
    and chat template are passed to the constructor so that ``save_pretrained`` keeps them.
    """
    check_max_length(model_max_length)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B:1",
        special_tokens=[(BOS, backend.token_to_id(BOS))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
