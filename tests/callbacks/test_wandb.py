import json
import struct

import pytest

from toolbox.core.errors import ConfigError
from toolbox.trainer.callbacks.wandb_logger import WandbCallback

pytest.importorskip("wandb")


def read_records(path):
    """The records of a W&B run file (a LevelDB-style log of protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    block, pos, buf, out = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's trailer
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        buf += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def flush():
    """finish() returns before the W&B service has written the run file; at process exit the
    service is shut down and the file completed. A test reads it in the same process: shut the
    service down now."""
    import wandb

    wandb.teardown()


def history(records):
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
    return rows


def test_offline_run_writes_config_and_history(trainer, drive, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cb = WandbCallback(project="tests", tags=["ci"])
    d = drive(cb)
    d.fit_start()
    for s in range(1, 5):
        d.step(loss=1.0 / s, lr=1e-3)
    d.eval(**{"eval/loss": 0.5})
    d.fit_end()
    assert cb.run is None and cb.run_id
    flush()

    (folder,) = (trainer.context.run_dir / "wandb").glob("offline-run-*")
    assert folder.name.endswith(cb.run_id)
    records = read_records(folder / f"run-{cb.run_id}.wandb")
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "tests" and run.display_name == "run" and list(run.tags) == ["ci"]
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    # the composed config, resolved: run.name interpolates trainer.max_steps
    assert config["trainer"] == {"max_steps": 10}
    assert config["run"] == {"name": 10}

    rows = history(records)
    assert [r["_step"] for r in rows] == [1, 2, 3, 4]
    assert [r["loss"] for r in rows] == [1.0, 0.5, 1 / 3, 0.25]
    assert rows[-1]["eval/loss"] == 0.5  # eval metrics land on the step they were computed at
    assert cb.state_dict() == {"run_id": cb.run_id}


def test_bad_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="mode"):
        WandbCallback(mode="cloud")


def test_resumed_run_continues_the_same_wandb_run(trainer, drive, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = WandbCallback(mode="offline")
    d = drive(first)
    d.fit_start()
    d.step(loss=1.0)
    state = first.state_dict()  # what the trainer's checkpoint holds
    d.fit_end()

    second = WandbCallback(mode="offline")
    second.load_state_dict(state)
    d2 = drive(second)
    d2.fit_start(resumed_from=1)
    d2.step(loss=0.5)
    d2.fit_end()
    flush()
    assert second.run_id == first.run_id
    folders = sorted((trainer.context.run_dir / "wandb").glob(f"offline-run-*-{first.run_id}*"))
    assert folders, "the resumed run is written under the same W&B run id"
    rows = [r for f in folders for r in history(read_records(f / f"run-{first.run_id}.wandb"))]
    assert sorted(r["_step"] for r in rows) == [1, 2]


def test_wandb_environment_variables_are_honoured(trainer, drive, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    monkeypatch.setenv("WANDB_TAGS", "a,b")
    cb = WandbCallback(tags=["ci"])
    assert (cb.project, cb.mode, cb.tags) == ("from-env", "offline", ["a", "b", "ci"])
    assert WandbCallback(project="cfg").project == "cfg"  # the config wins over the variable
    monkeypatch.setenv("WANDB_MODE", "online")
    assert WandbCallback().mode == "online"
    monkeypatch.setenv("WANDB_MODE", "cloud")
    with pytest.raises(ConfigError, match="WANDB_MODE"):
        WandbCallback()


def test_wandb_mode_disabled_writes_nothing(trainer, drive, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cb = WandbCallback()
    d = drive(cb)
    d.fit_start()
    d.step(loss=1.0)
    d.fit_end()
    assert cb.run is None and cb.run_id is None
    assert not (trainer.context.run_dir / "wandb").exists()
