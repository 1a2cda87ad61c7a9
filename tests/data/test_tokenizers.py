from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import TOKENIZERS
from toolbox.data.tokenizers.specials import SPECIAL_TOKENS

CHAT = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "3"}]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_char_vocabulary_is_specials_then_sorted_characters(char_tok):
    vocab = char_tok.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    chars = sorted(set("0123456789+-="))
    assert [vocab[c] for c in chars] == list(range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(chars)))
    assert len(char_tok) == len(SPECIAL_TOKENS) + len(chars)
    assert isinstance(char_tok, PreTrainedTokenizerFast)
    assert (char_tok.pad_token_id, char_tok.bos_token_id, char_tok.eos_token_id) == (0, 1, 2)
    assert char_tok.padding_side == "left" and char_tok.model_max_length == 64


def test_char_encodes_one_token_per_character_and_decodes_back(char_tok):
    ids = char_tok("12+34=46")["input_ids"]
    assert ids[0] == char_tok.bos_token_id and len(ids) == 1 + 8
    assert char_tok.convert_ids_to_tokens(ids[1:]) == list("12+34=46")
    assert char_tok.decode(ids, skip_special_tokens=True) == "12+34=46"
    assert char_tok.encode("9x", add_special_tokens=False)[1] == char_tok.unk_token_id  # unseen character


def test_char_is_deterministic_and_independent_of_corpus_order():
    a = TOKENIZERS.build({"name": "char"}, corpus=iter(["ba", "c a"]))
    b = TOKENIZERS.build({"name": "char"}, corpus=iter(["a c", "ab"]))
    assert a.get_vocab() == b.get_vocab()


def test_char_rejects_an_empty_corpus():
    with pytest.raises(DataError, match="no text"):
        TOKENIZERS.build({"name": "char"}, corpus=iter([]))


@pytest.mark.parametrize("which", ["char_tok", "bpe_tok"])
def test_save_and_reload_keep_everything(which, request, tmp_path):
    tok = request.getfixturevalue(which)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "12+34=46"
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.padding_side == "left" and again.model_max_length == tok.model_max_length
    assert (again.bos_token, again.eos_token, again.pad_token) == (
        tok.bos_token,
        tok.eos_token,
        tok.pad_token,
    )
    assert again.apply_chat_template(CHAT, tokenize=False) == tok.apply_chat_template(CHAT, tokenize=False)
    # the pretrained tokenizer reads it back unchanged
    loaded = TOKENIZERS.build({"name": "hf_tokenizer", "path": str(tmp_path)})
    assert loaded(text)["input_ids"] == tok(text)["input_ids"] and loaded.pad_token == tok.pad_token


def test_chat_template_renders_turns_and_generation_prompt(char_tok):
    text = char_tok.apply_chat_template(CHAT, tokenize=False)
    assert text == "<|bos|><|user|>1+2=<|eos|><|assistant|>3<|eos|>"
    prompt = char_tok.apply_chat_template(CHAT[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|bos|><|user|>1+2=<|eos|><|assistant|>"
    ids = char_tok.encode(text, add_special_tokens=False)
    assert char_tok.convert_ids_to_tokens(ids)[:3] == ["<|bos|>", "<|user|>", "1"]
    assert char_tok.decode(ids, skip_special_tokens=True) == "1+2=3"


def test_bpe_splits_every_digit_and_round_trips_any_text(bpe_tok):
    ids = bpe_tok.encode("12+19=31", add_special_tokens=False)
    assert bpe_tok.convert_ids_to_tokens(ids) == list("12+19=31")
    text = "the lazy fox, naïve 😀\nnew line"
    assert bpe_tok.decode(bpe_tok(text)["input_ids"], skip_special_tokens=True) == text
    assert bpe_tok.unk_token_id not in bpe_tok.encode(text)
    assert len(bpe_tok.encode("the quick brown fox", add_special_tokens=False)) < 10  # merges were learnt
    assert 256 + len(SPECIAL_TOKENS) < len(bpe_tok) <= 300


def test_trained_tokenizers_save_byte_identical_files(tmp_path):
    corpus = ["12+34=46", "hello there", "7*8=56"] * 10
    for run in ("a", "b"):
        for name, extra in (("char", {}), ("bpe", {"vocab_size": 280})):
            tok = TOKENIZERS.build({"name": name, **extra}, corpus=iter(corpus))
            tok.save_pretrained(tmp_path / run / name)
    for name in ("char", "bpe"):
        assert _files(tmp_path / "a" / name) == _files(tmp_path / "b" / name)


def test_bpe_vocab_too_small_is_a_config_error():
    with pytest.raises(ConfigError, match="vocab_size=264"):
        TOKENIZERS.build({"name": "bpe", "vocab_size": 100}, corpus=iter(["x"]))


def test_pretrained_adds_a_pad_token_and_left_padding(tmp_path, char_tok):
    char_tok.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    config["padding_side"] = "right"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert AutoTokenizer.from_pretrained(tmp_path).pad_token is None
    tok = TOKENIZERS.build({"name": "hf_tokenizer", "path": str(tmp_path), "model_max_length": 16})
    assert tok.pad_token == tok.eos_token and tok.padding_side == "left" and tok.model_max_length == 16


def test_pretrained_missing_folder_or_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="local directory"):
        TOKENIZERS.build({"name": "hf_tokenizer", "path": str(tmp_path)})  # an empty folder
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DataError, match="is a file"):
        TOKENIZERS.build({"name": "hf_tokenizer", "path": str(tmp_path / "x.json")})


def test_offline_hub_ids_fail_fast_with_the_fix(tmp_path):
    """A hub id with the hub unreachable: the tokenizer and the hub source say what to do instead."""
    script = textwrap.dedent(
        """
        from toolbox.core.errors import DataError
        from toolbox.core.registries import SOURCES, TOKENIZERS
        for registry, spec in ((TOKENIZERS, {"name": "hf_tokenizer", "path": "nobody/no-such-tokenizer"}),
                               (SOURCES, {"name": "hub", "path": "nobody/no-such-dataset"})):
            try:
                registry.build(spec)
            except DataError as e:
                print("DataError:", e)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("DataError:")]
    assert len(lines) == 2, out.stdout + out.stderr
    assert "nobody/no-such-tokenizer" in lines[0] and "tokenizer.path at a local directory" in lines[0]
    assert "nobody/no-such-dataset" in lines[1] and "data=local data.source.path=" in lines[1]
