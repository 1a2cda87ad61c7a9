from __future__ import annotations

import logging

import pytest

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import DATASETS


def _factory(tok, name, **settings):
    return DATASETS.build({"name": name, **settings}, tokenizer=tok)


def _ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("tok_name", ["char_tok", "bpe_tok"])
def test_prompt_completion_layout_and_mask(tok_name, request):
    tok = request.getfixturevalue(tok_name)
    record = {"prompt": "12+34=", "completion": "46", "answer": "46", "extra": 1}
    [ex] = _factory(tok, "prompt_completion")([record])
    bos, eos = tok.bos_token_id, tok.eos_token_id
    prompt, completion = _ids(tok, "12+34="), _ids(tok, "46")
    assert ex["input_ids"] == [bos, *prompt, *completion, eos]
    assert ex["completion_mask"] == [0] * (1 + len(prompt)) + [1] * (len(completion) + 1)
    assert ex["prompt_ids"] == [bos, *prompt]
    assert {k: ex[k] for k in ("prompt", "completion", "answer")} == {
        k: record[k] for k in ("prompt", "completion", "answer")
    }
    assert "extra" not in ex
    scored = [t for t, m in zip(ex["input_ids"], ex["completion_mask"], strict=True) if m]
    assert tok.decode(scored, skip_special_tokens=True) == "46"


def test_prompt_completion_truncates_prompts_from_the_left_and_skips_long_completions(char_tok, caplog):
    factory = _factory(char_tok, "prompt_completion", max_length=8)
    records = [
        {"prompt": "1+2=", "completion": "3"},  # 1 + 4 + 1 + 1 = 7 tokens: kept whole
        {"prompt": "123+456=", "completion": "579"},  # 13 tokens: prompt cut to its last 3
        {"prompt": "1+1=", "completion": "123456"},  # completion + bos + eos = 8: no room for the prompt
        {"prompt": "1+1=", "completion": "1234567"},
    ]
    with caplog.at_level(logging.WARNING):
        out = factory(records)
    assert len(out) == 2 and factory.num_skipped == 2 and factory.num_truncated == 1
    assert len(out[0]["input_ids"]) == 7
    cut = out[1]
    assert len(cut["input_ids"]) == 8 and cut["input_ids"][0] == char_tok.bos_token_id
    assert char_tok.decode(cut["prompt_ids"], skip_special_tokens=True) == "56="
    assert cut["completion_mask"] == [0, 0, 0, 0, 1, 1, 1, 1]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "skipped 2 of 4" in warnings[0].getMessage()


def test_lm_text_scores_every_token(char_tok):
    [ex] = _factory(char_tok, "lm_text", field="body")([{"body": "1+1=2", "answer": "2"}])
    assert ex["input_ids"] == [char_tok.bos_token_id, *_ids(char_tok, "1+1=2"), char_tok.eos_token_id]
    assert ex["completion_mask"] == [1] * 7 and ex["answer"] == "2"
    [cut] = _factory(char_tok, "lm_text", max_length=4)([{"text": "123456"}])
    assert len(cut["input_ids"]) == 4


def test_chat_scores_assistant_turns_only(char_tok):
    messages = [
        {"role": "system", "content": "1"},
        {"role": "user", "content": "1+2="},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "2+2="},
        {"role": "assistant", "content": "4"},
    ]
    [ex] = _factory(char_tok, "chat")([{"messages": messages}])
    assert ex["input_ids"] == _ids(char_tok, char_tok.apply_chat_template(messages, tokenize=False))
    tokens = char_tok.convert_ids_to_tokens(ex["input_ids"])
    scored = [t for t, m in zip(tokens, ex["completion_mask"], strict=True) if m]
    assert scored == ["3", "<|eos|>", "4", "<|eos|>"]
    prompt = char_tok.apply_chat_template(messages[:4], tokenize=False, add_generation_prompt=True)
    assert ex["prompt_ids"] == _ids(char_tok, prompt)
    skipped = _factory(char_tok, "chat", max_length=10)
    assert skipped([{"messages": messages}]) == [] and skipped.num_skipped == 1
    with pytest.raises(DataError, match="list of"):
        _factory(char_tok, "chat")([{"messages": "hi"}])


def test_chat_matches_the_bpe_tokenization_of_the_whole_conversation(bpe_tok):
    messages = [{"role": "user", "content": "the fox"}, {"role": "assistant", "content": "jumps over"}]
    [ex] = _factory(bpe_tok, "chat")([{"messages": messages}])
    assert ex["input_ids"] == _ids(bpe_tok, bpe_tok.apply_chat_template(messages, tokenize=False))
    scored = [t for t, m in zip(ex["input_ids"], ex["completion_mask"], strict=True) if m]
    assert bpe_tok.decode(scored) == "jumps over<|eos|>"


def test_preference_pairs(char_tok):
    factory = _factory(char_tok, "preference_pairs", max_length=9)
    [ex] = factory([{"prompt": "1+2=", "chosen": "3", "rejected": "4", "answer": "3"}])
    eos = char_tok.eos_token_id
    assert ex["prompt_ids"] == [char_tok.bos_token_id, *_ids(char_tok, "1+2=")]
    assert ex["chosen_ids"] == [*_ids(char_tok, "3"), eos] and ex["rejected_ids"] == [
        *_ids(char_tok, "4"),
        eos,
    ]
    assert ex["answer"] == "3"
    [cut] = factory([{"prompt": "12345+1=", "chosen": "1", "rejected": "12346"}])
    assert len(cut["prompt_ids"]) + len(cut["rejected_ids"]) == 9
    assert factory([{"prompt": "1=", "chosen": "1", "rejected": "12345678"}]) == []


def test_prompt_only_keeps_every_raw_field(char_tok):
    record = {"prompt": "12+34=", "answer": "46", "meta": {"id": 7}}
    [ex] = _factory(char_tok, "prompt_only", max_length=5)([record])
    assert ex["answer"] == "46" and ex["meta"] == {"id": 7} and ex["prompt"] == "12+34="
    assert ex["prompt_ids"] == [char_tok.bos_token_id, *_ids(char_tok, "+34=")]  # cut from the left


def test_missing_fields_and_bad_settings_say_what_to_change(char_tok):
    with pytest.raises(DataError, match=r"record 1 has no field 'prompt' .*data.dataset.prompt_field"):
        _factory(char_tok, "prompt_completion")([{"prompt": "1", "completion": "2"}, {"question": "x"}])
    with pytest.raises(ConfigError, match="max_length"):
        _factory(char_tok, "lm_text", max_length=1)
    with pytest.raises(ConfigError, match="unknown key"):
        DATASETS.build({"name": "prompt_completion", "max_len": 3}, "data.dataset", tokenizer=char_tok)


def test_arithmetic_end_to_end(arith, char_tok):
    examples = _factory(char_tok, "prompt_completion", max_length=32)(arith.train)
    assert len(examples) == len(arith.train)
    for ex, record in zip(examples, arith.train, strict=True):
        assert (
            char_tok.decode(ex["input_ids"], skip_special_tokens=True)
            == record["prompt"] + record["completion"]
        )
