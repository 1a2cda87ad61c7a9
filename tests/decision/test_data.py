"""The intents source and the decision dataset: disjoint splits, prompts as the reader renders them, errors."""

from __future__ import annotations

import pytest

from toolbox.core.errors import ConfigError, DataError
from toolbox.data.sources.intents import intents
from toolbox.decision import DecisionReader, Question
from toolbox.decision.backends.hf import HFDecisionBackend
from toolbox.decision.data import DecisionCollator, DecisionDataset


def test_intents_splits_are_disjoint_and_labelled():
    splits = intents(num_train=300, num_test=100, num_intents=10, seed=3)
    train, test = {r["text"] for r in splits.train}, {r["text"] for r in splits.test}
    assert len(train) == 300 and len(test) == 100 and not train & test
    assert splits.facts == {"num_classes": 10}
    for r in splits.train[:50]:
        assert (" " + r["options"][r["label"]]) in (" " + r["text"])  # the message names its intent
    with pytest.raises(ConfigError, match="num_intents: 13"):
        intents(num_intents=13)


def test_dataset_prompts_are_the_readers(tiny_model):
    model, tok, _ = tiny_model
    record = {
        "text": "I lost my card",
        "label": "card",
        "options": ["balance", "card", "refund"],
        "question": "Which?",
    }
    data = DecisionDataset(tok, rotations=None, order="given")
    [ex] = data([record])
    assert ex["target"] == 1 and ex["perms"] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    reader = DecisionReader(HFDecisionBackend(model, tok))
    q = Question.choice("Which?", record["options"])
    for perm, ids in zip(ex["perms"], ex["rotation_ids"], strict=True):
        prompt, _ = reader.prompt("I lost my card", q, perm)
        assert ids == tok.encode(prompt.text, add_special_tokens=False)
    batch = DecisionCollator(tok)([ex, ex])
    assert batch["input_ids"].shape[0] == 6 and batch["perms"].shape == (2, 3, 3)


def test_first_bias_moves_the_label_first(tiny_model):
    _, tok, _ = tiny_model
    records = [{"text": f"m{i}", "label": i % 4, "options": ["a", "b", "c", "d"]} for i in range(40)]
    biased = DecisionDataset(tok, first_bias=1.0)(records)
    assert all(ex["perms"][0][0] == ex["target"] for ex in biased)


def test_repeats_draw_new_orders_and_keep_the_bias(tiny_model):
    _, tok, _ = tiny_model
    records = [{"text": f"m{i}", "label": i % 5, "options": ["a", "b", "c", "d", "e"]} for i in range(200)]
    examples = DecisionDataset(tok, repeats=3, first_bias=0.3, seed=1)(records)
    assert len(examples) == 600 and [ex["text"] for ex in examples[200:400]] == [r["text"] for r in records]
    orders = {tuple(ex["perms"][0]) for ex in examples[::200]}  # message m0 in its three copies
    assert len(orders) > 1
    first = sum(ex["perms"][0][0] == ex["target"] for ex in examples) / 600
    assert 0.3 < first < 0.5  # 0.3 + 0.7 / 5 = 0.44 expected
    with pytest.raises(ConfigError, match="repeats: 0"):
        DecisionDataset(tok, repeats=0)


def test_dataset_errors_name_the_field(tiny_model):
    _, tok, _ = tiny_model
    with pytest.raises(DataError, match="no field 'options'"):
        DecisionDataset(tok)([{"text": "x", "label": 0}])
    with pytest.raises(DataError, match="label 'zzz' is neither an option nor an index"):
        DecisionDataset(tok)([{"text": "x", "label": "zzz", "options": ["a", "b"]}])
    mixed = DecisionDataset(tok)(
        [
            {"text": "x", "label": 0, "options": ["a", "b"]},
            {"text": "y", "label": 0, "options": ["a", "b", "c"]},
        ]
    )
    with pytest.raises(DataError, match="mixes"):
        DecisionCollator(tok)(mixed)


def test_turn_orders_are_rotations_of_the_listing_or_its_reverse(tiny_model):
    _, tok, _ = tiny_model
    records = [{"text": f"m{i}", "label": i % 5, "options": ["a", "b", "c", "d", "e"]} for i in range(30)]
    forward = {tuple(list(range(5))[s:] + list(range(5))[:s]) for s in range(5)}
    listings = forward | {tuple(reversed(p)) for p in forward}
    for ex in DecisionDataset(tok, order="turn", first_bias=0.5)(records):
        assert tuple(ex["perms"][0]) in listings


def test_hints_record_where_each_option_starts(tiny_model):
    _, tok, _ = tiny_model
    record = {"text": "I lost my card", "label": 1, "options": ["balance", "lost card", "refund"]}
    [ex] = DecisionDataset(tok, rotations=None, order="given", hints=True)([record])
    assert len(ex["option_pos"]) == 3
    for ids, perm, pos in zip(ex["rotation_ids"], ex["perms"], ex["option_pos"], strict=True):
        for j, i in enumerate(perm):
            # the option's text begins at that token: its first token decodes to the option's start
            start = tok.decode(ids[pos[j] :]).lstrip()
            assert start.startswith(record["options"][i]), (start, record["options"][i])
            assert tok.decode(ids[: pos[j]]).rstrip().endswith("\n" + "ABC"[j] + ".")
    batch = DecisionCollator(tok)([ex, ex])
    assert batch["option_pos"].shape == (6, 3)
    assert "option_pos" not in DecisionDataset(tok)([record])[0]
