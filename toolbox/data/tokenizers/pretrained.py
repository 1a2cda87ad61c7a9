"""A tokenizer saved with ``save_pretrained`` (a local folder), or a hub id where the hub is reachable."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from toolbox.core.errors import DataError
from toolbox.core.registries import TOKENIZERS
from toolbox.data.tokenizers.specials import CHAT_TEMPLATE, PAD, check_max_length


@TOKENIZERS.register("hf_tokenizer")
def pretrained(path: str, model_max_length: int | None = None) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained(path)``, made ready for training and batched generation.

    The padding side becomes ``"left"``; a tokenizer without a pad token gets eos as its pad token
    (or a new ``<|pad|>`` token when it has no eos either); one without a chat template gets the
    simple template of the tokenizers trained here. Everything else is kept as saved.

    Args:
        path: a local folder written by ``save_pretrained`` (holding tokenizer.json), or a hub id
            such as ``Qwen/Qwen2.5-0.5B`` where the hub can be reached.
        model_max_length: override the saved maximum sequence length (null: keep it).
    """
    if model_max_length is not None:
        check_max_length(model_max_length)
    local = Path(path).expanduser()
    if local.exists() and not local.is_dir():
        raise DataError(
            f"tokenizer.path: {local} is a file; point tokenizer.path at the folder save_pretrained wrote."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(local) if local.is_dir() else path)
    except (OSError, ValueError) as e:
        where = (
            f"the folder {local} holds no loadable tokenizer"
            if local.is_dir()
            else f"'{path}' is no local folder and could not be loaded from the hub"
        )
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(
            f"tokenizer.path: {where} ({first}). Point tokenizer.path at a local directory written by "
            "save_pretrained (tokenizer.json, tokenizer_config.json), for example the tokenizer/ folder "
            "of `toolbox data --out DIR` or of a trained model."
        ) from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        else:
            tokenizer.add_special_tokens({"pad_token": PAD})
    tokenizer.padding_side = "left"
    if model_max_length is not None:
        tokenizer.model_max_length = model_max_length
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
