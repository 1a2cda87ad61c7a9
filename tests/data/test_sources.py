from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import SOURCES

GSM8K = Path(__file__).resolve().parents[2] / "../shared/data/gsm8k/train.jsonl"
RECORDS = [{"prompt": f"q{i}", "completion": f"a{i}", "answer": str(i)} for i in range(20)]


def _check(record: dict) -> int:
    a, op, b = _parse(record["prompt"])
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def _parse(prompt: str) -> tuple[int, str, int]:
    assert prompt.endswith("=")
    body = prompt[:-1]
    for i in range(1, len(body)):
        if body[i] in "+-*":
            return int(body[:i]), body[i], int(body[i + 1 :])
    raise AssertionError(prompt)


# arithmetic ---------------------------------------------------------------------------------------
def test_arithmetic_records_are_correct_disjoint_and_in_range():
    s = SOURCES.build(
        {"name": "arithmetic", "digits": 2, "operators": ["+", "-", "*"], "num_train": 2000, "num_test": 300}
    )
    assert len(s.train) == 2000 and len(s.test) == 300
    for r in [*s.train, *s.test]:
        assert r["completion"] == r["answer"] == str(_check(r))
        a, op, b = _parse(r["prompt"])
        assert 0 <= a <= 99 and 0 <= b <= 99
    train_prompts = {r["prompt"] for r in s.train}
    assert len(train_prompts) == 2000  # no repeats either
    assert not train_prompts & {r["prompt"] for r in s.test}
    assert {_parse(r["prompt"])[1] for r in s.train} == {"+", "-", "*"}


def test_arithmetic_is_deterministic_from_the_seed():
    spec = {"name": "arithmetic", "num_train": 100, "num_test": 10}
    assert SOURCES.build(spec).train == SOURCES.build(spec).train
    assert SOURCES.build({**spec, "seed": 1}).train != SOURCES.build(spec).train


def test_arithmetic_can_use_every_problem_and_no_more():
    s = SOURCES.build({"name": "arithmetic", "digits": 1, "num_train": 90, "num_test": 10})
    assert {r["prompt"] for r in [*s.train, *s.test]} == {f"{a}+{b}=" for a in range(10) for b in range(10)}
    with pytest.raises(ConfigError, match="only 100 distinct problems"):
        SOURCES.build({"name": "arithmetic", "digits": 1, "num_train": 91, "num_test": 10})


def test_arithmetic_reversed_results_keep_the_problems_and_the_plain_answer():
    plain = SOURCES.build(
        {"name": "arithmetic", "num_train": 50, "num_test": 10, "seed": 1234, "zero_pad": True}
    )
    rev = SOURCES.build(
        {
            "name": "arithmetic",
            "num_train": 50,
            "num_test": 10,
            "seed": 1234,
            "zero_pad": True,
            "reverse_result": True,
        }
    )
    for p, r in zip(plain.train + plain.test, rev.train + rev.test, strict=True):
        assert (r["prompt"], r["answer"]) == (p["prompt"], p["answer"])
        assert r["completion"] == p["completion"][::-1] and len(r["completion"]) == 3
    assert {"prompt": "05+04=", "completion": "900", "answer": "9"} in rev.train
    neg = SOURCES.build(
        {
            "name": "arithmetic",
            "operators": ["-"],
            "num_train": 50,
            "num_test": 0,
            "seed": 1,
            "reverse_result": True,
        }
    )
    for r in neg.train:
        digits = r["completion"].lstrip("-")
        assert r["completion"].startswith("-") == r["answer"].startswith("-")
        assert int(digits[::-1]) == abs(int(r["answer"]))


def test_arithmetic_pairs_write_the_rejected_answer_reversed_too():
    pairs = SOURCES.build(
        {
            "name": "arithmetic_pairs",
            "num_train": 100,
            "num_test": 20,
            "zero_pad": True,
            "reverse_result": True,
        }
    )
    for r in pairs.train + pairs.test:
        assert r["chosen"] == r["completion"] == str(int(r["answer"])).zfill(3)[::-1]
        assert len(r["rejected"]) == 3 and r["rejected"] != r["chosen"]


def test_arithmetic_rejects_unknown_operators():
    with pytest.raises(ConfigError, match="operators"):
        SOURCES.build({"name": "arithmetic", "operators": ["/"]})
    with pytest.raises(ConfigError, match="data.source.operators"):
        SOURCES.build({"name": "arithmetic", "operators": "+"}, "data.source")  # not a list


# local --------------------------------------------------------------------------------------------
def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif suffix == ".json":
        path.write_text(json.dumps(records))
    elif suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    elif suffix == ".parquet":
        from datasets import Dataset

        Dataset.from_list(records).to_parquet(str(path))
    elif suffix == ".arrow":
        import pyarrow as pa

        table = pa.Table.from_pylist(records)
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet", ".arrow"])
def test_local_reads_each_format_and_holds_out_a_seeded_fraction(tmp_path, suffix):
    path = _write(tmp_path / f"data{suffix}", RECORDS)
    spec = {"name": "local_files", "path": str(path), "test_fraction": 0.25, "seed": 3}
    s = SOURCES.build(spec)
    assert len(s.test) == 5 and len(s.train) == 15
    assert sorted([*s.train, *s.test], key=lambda r: int(r["answer"])) == RECORDS
    assert SOURCES.build(spec).test == s.test  # seeded
    assert SOURCES.build({**spec, "seed": 4}).test != s.test


def test_local_folder_of_split_files(tmp_path):
    _write(tmp_path / "train.jsonl", RECORDS[:15])
    _write(tmp_path / "test.jsonl", RECORDS[15:])
    s = SOURCES.build({"name": "local_files", "path": str(tmp_path)})
    assert s.train == RECORDS[:15] and s.test == RECORDS[15:]
    s = SOURCES.build({"name": "local_files", "path": str(tmp_path), "train": "test", "test": None})
    assert s.train == RECORDS[15:] and s.test == []


def test_local_save_to_disk_folders(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict(
        {"train": Dataset.from_list(RECORDS[:12]), "test": Dataset.from_list(RECORDS[12:])}
    ).save_to_disk(str(tmp_path / "dict"))
    s = SOURCES.build({"name": "local_files", "path": str(tmp_path / "dict")})
    assert s.train == RECORDS[:12] and s.test == RECORDS[12:]
    Dataset.from_list(RECORDS).save_to_disk(str(tmp_path / "single"))
    s = SOURCES.build({"name": "local_files", "path": str(tmp_path / "single"), "test_fraction": 0.1})
    assert len(s.train) == 18 and len(s.test) == 2


def test_local_missing_things_are_data_errors_naming_them(tmp_path):
    with pytest.raises(DataError, match=r"nowhere.* does not exist.*train\.jsonl"):
        SOURCES.build({"name": "local_files", "path": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match=r"no training split: looked for train\.jsonl, train\.json"):
        SOURCES.build({"name": "local_files", "path": str(tmp_path)})
    _write(tmp_path / "train.jsonl", RECORDS)
    with pytest.raises(DataError, match="test_fraction"):
        SOURCES.build({"name": "local_files", "path": str(tmp_path)})
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n\n{"prompt": oops}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:3: not valid JSON"):
        SOURCES.build({"name": "local_files", "path": str(tmp_path / "bad.jsonl"), "test": None})


# hub (on a local folder: the same load_dataset code path, no network) -------------------------------
def test_hub_loads_through_datasets(tmp_path):
    _write(tmp_path / "data" / "train.jsonl", RECORDS[:16])
    _write(tmp_path / "data" / "test.jsonl", RECORDS[16:])
    spec = {"name": "hub", "path": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache")}
    s = SOURCES.build(spec)
    assert s.train == RECORDS[:16] and s.test == RECORDS[16:]
    with pytest.raises(DataError, match="no split 'validation'"):
        SOURCES.build({**spec, "test_split": "validation"})
    s = SOURCES.build({**spec, "test_split": "validation", "test_fraction": 0.25})
    assert len(s.train) == 12 and len(s.test) == 4


# gsm8k --------------------------------------------------------------------------------------------
@pytest.mark.skipif(
    not GSM8K.is_file(), reason=f"GSM8K not found at {GSM8K} (the shared data folder is absent)"
)
def test_gsm8k_real_file():
    s = SOURCES.build({"name": "gsm8k", "path": str(GSM8K), "num_test": 500})
    assert len(s.train) + len(s.test) == 7473 and len(s.test) == 500
    by_prompt = {r["prompt"]: r for r in [*s.train, *s.test]}
    first = next(r for p, r in by_prompt.items() if p.startswith("Natalia sold clips"))
    assert first["prompt"].endswith("\nAnswer: ") and first["answer"] == "72"
    assert first["completion"].endswith("#### 72")
    for r in [*s.train, *s.test]:
        assert "," not in r["answer"] and float(r["answer"]) == float(
            r["completion"].split("#### ")[-1].replace(",", "")
        )
    assert not {r["prompt"] for r in s.train} & {r["prompt"] for r in s.test}
    assert SOURCES.build({"name": "gsm8k", "path": str(GSM8K)}).test == s.test


def test_gsm8k_answers_lose_commas_and_bad_lines_name_file_and_line(tmp_path):
    good = [{"question": f"Q{i}?", "answer": f"work\n#### 1,00{i}"} for i in range(4)]
    path = _write(tmp_path / "g.jsonl", good)
    s = SOURCES.build({"name": "gsm8k", "path": str(path), "num_test": 1})
    assert sorted(r["answer"] for r in [*s.train, *s.test]) == ["1000", "1001", "1002", "1003"]
    with open(path, "a") as f:
        f.write(json.dumps({"question": "no final answer", "answer": "42"}) + "\n")
    with pytest.raises(DataError, match=r"g\.jsonl:5:"):
        SOURCES.build({"name": "gsm8k", "path": str(path), "num_test": 1})
    with pytest.raises(DataError, match="does not exist"):
        SOURCES.build({"name": "gsm8k", "path": str(tmp_path / "none.jsonl")})
    with pytest.raises(ConfigError, match="num_test"):
        SOURCES.build({"name": "gsm8k", "path": str(_write(tmp_path / "h.jsonl", good)), "num_test": 4})
