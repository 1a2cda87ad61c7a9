"""Unpaired preference data (KTO): the dataset factory, the collator's rows (checked against TRL
1.16's KTOTrainer data preparation and collator), the arithmetic source, and the error messages."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS, DATASETS, SOURCES


def _factory(tok, **settings):
    return DATASETS.build({"name": "unpaired_preference", **settings}, tokenizer=tok)


def _collator(tok, **settings):
    return COLLATORS.build({"name": "unpaired_preference_pad", **settings}, tokenizer=tok)


def _ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


RECORDS = [
    {"prompt": f"{i}+{i % 7}=", "completion": str(i + i % 7 + (i % 2)), "label": i % 2 == 0}
    for i in range(10)
]


def test_layout_truncation_and_skips(char_tok, caplog):
    factory = _factory(char_tok, max_length=9)
    [ex] = factory([{"prompt": "1+2=", "completion": "3", "label": True, "answer": "3"}])
    assert ex["prompt_ids"] == [char_tok.bos_token_id, *_ids(char_tok, "1+2=")]
    assert ex["completion_ids"] == [*_ids(char_tok, "3"), char_tok.eos_token_id]
    assert ex["label"] is True and ex["answer"] == "3" and ex["completion"] == "3"
    [cut] = factory([{"prompt": "12345+1=", "completion": "12346", "label": False}])
    assert len(cut["prompt_ids"]) + len(cut["completion_ids"]) == 9 and cut["label"] is False
    with caplog.at_level(logging.WARNING):
        assert factory([{"prompt": "1=", "completion": "12345678", "label": True}]) == []
    assert "skipped 1 of 1" in caplog.text
    # NumPy bools (a parquet/arrow column read through numpy) are labels too; field names are settings
    [ex] = _factory(char_tok, prompt_field="q", completion_field="a", label_field="good")(
        [{"q": "1+1=", "a": "2", "good": np.bool_(True)}]
    )
    assert ex["label"] is True


def test_label_errors_name_the_record_and_the_fix(char_tok):
    factory = _factory(char_tok)
    with pytest.raises(DataError, match=r"record 1 has no field 'label' .*data.dataset.label_field"):
        factory([RECORDS[0], {"prompt": "1+1=", "completion": "2"}])
    with pytest.raises(
        DataError, match=r"record 0 has a int in field 'label' \(1\); a label must be a boolean"
    ):
        factory([{"prompt": "1+1=", "completion": "2", "label": 1}])
    with pytest.raises(DataError, match=r"record 0 has a str in field 'label' \('true'\)"):
        factory([{"prompt": "1+1=", "completion": "2", "label": "true"}])
    with pytest.raises(
        DataError, match=r"record 0 has no field 'completion' .*data.dataset.completion_field"
    ):
        factory([{"prompt": "1+1=", "chosen": "2", "label": True}])


def test_collator_rows_mismatched_rows_and_labels(char_tok):
    examples = _factory(char_tok)(RECORDS[:4])
    plain = _collator(char_tok)(examples)
    assert plain["input_ids"].shape[0] == 4 and plain["num_examples"] == 4
    assert plain["label"].dtype == torch.bool and plain["label"].tolist() == [True, False, True, False]
    batch = _collator(char_tok, mismatched=True)(examples)
    assert batch["input_ids"].shape[0] == 8
    for r in range(8):
        prompt = examples[r % 4]["prompt_ids"]
        completion = examples[r]["completion_ids"] if r < 4 else examples[(r - 4 - 1) % 4]["completion_ids"]
        n = len(prompt) + len(completion)
        assert batch["input_ids"][r, :n].tolist() == [*prompt, *completion]
        assert batch["attention_mask"][r].sum() == n
        assert batch["completion_mask"][r].tolist()[len(prompt) : n] == [1] * len(completion)
        assert batch["completion_mask"][r].sum() == len(completion)
    assert "ref_logps" not in batch
    with_ref = [{**ex, "ref_logps": -float(i)} for i, ex in enumerate(examples)]
    assert _collator(char_tok)(with_ref)["ref_logps"].tolist() == [0.0, -1.0, -2.0, -3.0]


def test_batches_equal_trl_kto_data_preparation_and_collator(char_tok):
    """TRL 1.16 tokenizes, adds the KL completions (rotated by one within each batch of
    per_device_train_batch_size) and collates; our factory + collator give the same tensors."""
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from trl import KTOTrainer
    from trl.trainer.kto_trainer import DataCollatorForUnpairedPreference

    b = 4
    fake = SimpleNamespace(
        calculate_KL=True, _tokenizer=char_tok, desirable_weight=1.0, undesirable_weight=1.0
    )
    args = SimpleNamespace(dataset_num_proc=None, max_length=None, per_device_train_batch_size=b)
    trl_data = KTOTrainer._prepare_dataset(fake, datasets.Dataset.from_list(RECORDS), char_tok, args, "train")
    trl_collate = DataCollatorForUnpairedPreference(pad_token_id=char_tok.pad_token_id)
    ours = _factory(char_tok)(RECORDS)
    collate = _collator(char_tok, mismatched=True)
    for start in range(0, len(RECORDS), b):  # TRL's sequential batches (the last one has 2 examples)
        chunk = [trl_data[i] for i in range(start, min(start + b, len(RECORDS)))]
        theirs = trl_collate(
            [
                {k: ex[k] for k in ("prompt_ids", "completion_ids", "KL_completion_ids", "label")}
                for ex in chunk
            ]
        )
        mine = collate(ours[start : start + b])
        n = len(chunk)
        for key in ("input_ids", "attention_mask", "completion_mask"):
            width = theirs[key].shape[1]
            assert torch.equal(mine[key][:n, :width], theirs[key]), key
            assert not mine[key][:n, width:].any() or key == "input_ids"
            kl_width = theirs[f"KL_{key}"].shape[1]
            assert torch.equal(mine[key][n:, :kl_width], theirs[f"KL_{key}"]), f"KL_{key}"
        assert torch.equal(mine["label"], theirs["label"])


def test_collator_errors_say_which_collator(char_tok):
    pairs = DATASETS.build({"name": "preference_pairs"}, tokenizer=char_tok)(
        [{"prompt": "1+2=", "chosen": "3", "rejected": "4"}]
    )
    with pytest.raises(
        DataError, match=r"example 0 has no completion_ids, label .*data.collator.name=preference_pad\."
    ):
        _collator(char_tok)(pairs)
    unpaired = _factory(char_tok)(RECORDS[:2])
    with pytest.raises(DataError, match=r"data.collator.name=unpaired_preference_pad\."):
        COLLATORS.build({"name": "preference_pad"}, tokenizer=char_tok)(unpaired)
    with pytest.raises(DataError, match=r"example 1 has the label 1"):
        _collator(char_tok)([unpaired[0], {**unpaired[1], "label": 1}])
    with pytest.raises(DataError, match="empty batch"):
        _collator(char_tok)([])
    with pytest.raises(ConfigError, match="pad_to_multiple_of"):
        _collator(char_tok, pad_to_multiple_of=0)


def test_arithmetic_unpaired_source():
    settings = {"name": "arithmetic_unpaired", "num_train": 200, "num_test": 40, "zero_pad": True}
    splits = SOURCES.build(settings)
    problems = SOURCES.build(
        {"name": "arithmetic", "num_train": 200, "num_test": 40, "seed": 1234, "zero_pad": True}
    )
    assert [r["prompt"] for r in splits.train] == [r["prompt"] for r in problems.train]  # the same split
    assert [r["prompt"] for r in splits.test] == [r["prompt"] for r in problems.test]
    for record, problem in zip(splits.train + splits.test, problems.train + problems.test, strict=True):
        assert record["reference"] == problem["completion"] and isinstance(record["label"], bool)
        assert (record["completion"] == record["reference"]) == record["label"]
        assert len(record["completion"]) == len(record["reference"])  # zero-padded like the right one
    good = sum(r["label"] for r in splits.train) / len(splits.train)
    assert 0.35 < good < 0.65
    assert all(r["label"] for r in SOURCES.build({**settings, "desirable_fraction": 1.0}).train)
    assert not any(r["label"] for r in SOURCES.build({**settings, "desirable_fraction": 0.0}).train)
    assert SOURCES.build(settings).train == splits.train  # deterministic
    with pytest.raises(ConfigError, match="desirable_fraction"):
        SOURCES.build({**settings, "desirable_fraction": 1.5})
    with pytest.raises(ConfigError, match="mistakes"):
        SOURCES.build({**settings, "mistakes": ["typo"]})
