import torch

from toolbox.core.checkpointer import Checkpointer
from toolbox.core.errors import CheckpointError


def test_save_list_prune_and_load(tmp_path):
    ck = Checkpointer(tmp_path)
    for step in (10, 20, 30):
        ck.save(step, {"step": step, "w": torch.full((2,), float(step))})
    assert [p.name for p in ck.list()] == ["step_00000010", "step_00000020", "step_00000030"]
    ck.prune(2)
    assert [p.name for p in ck.list()] == ["step_00000020", "step_00000030"]
    path, state = ck.load_latest()
    assert path.name == "step_00000030" and state["w"].tolist() == [30.0, 30.0]


def test_temp_folder_of_an_interrupted_save_is_ignored(tmp_path):
    ck = Checkpointer(tmp_path)
    ck.save(10, {"step": 10})
    (ck.root / ".tmp-step_00000020-999").mkdir()  # what a SIGKILL mid-save leaves
    assert [p.name for p in ck.list()] == ["step_00000010"]
    ck.save(30, {"step": 30})
    assert not list(ck.root.glob(".tmp-*"))


def test_corrupt_newest_falls_back_to_previous(tmp_path, caplog):
    ck = Checkpointer(tmp_path)
    ck.save(10, {"step": 10})
    newest = ck.save(20, {"step": 20})
    with open(newest / "state.pt", "r+b") as f:
        f.seek(10)
        f.write(b"garbage")
    path, state = ck.load_latest()
    assert state["step"] == 10
    assert "checksum mismatch" in caplog.text


def test_all_corrupt_raises_instead_of_restarting(tmp_path):
    ck = Checkpointer(tmp_path)
    only = ck.save(10, {"step": 10})
    (only / "state.pt").write_bytes(b"")
    try:
        ck.load_latest()
    except CheckpointError as e:
        assert "no usable checkpoint" in str(e)
    else:
        raise AssertionError("expected CheckpointError")
    assert Checkpointer(tmp_path / "empty").load_latest() is None
