"""What a failed write looks like to the user: ``write_error`` finds the ``OSError`` behind what a
writer library raises, and ``export_pretrained`` leaves no half-written model folder."""

from __future__ import annotations

import errno

import pytest

from toolbox.core.errors import OutputError
from toolbox.core.output import write_error
from toolbox.nn.export import export_pretrained


def test_write_error_reads_the_writers_of_torch_and_safetensors():
    class SafetensorError(Exception):  # what safetensors' Rust writer raises on a full disk
        pass

    full = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert write_error(full).errno == errno.ENOSPC
    zip_full = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
    assert write_error(zip_full).errno == errno.ENOSPC
    assert write_error(OSError(errno.EROFS, "Read-only file system")).errno == errno.EROFS
    # not caused by where the user points the run: left to propagate as it is
    assert write_error(SafetensorError("I/O error: Input/output error (os error 5)")) is None
    assert write_error(ValueError("bad tensor")) is None
    assert write_error(OSError(errno.EIO, "Input/output error")) is None


class _FillsTheDisk:
    """A model whose save_pretrained writes part of a file, then finds the disk full."""

    def save_pretrained(self, folder, state_dict=None):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_export_leaves_no_temp_folder_and_keeps_the_old_model(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("{}\n")  # an earlier export
    with pytest.raises(OutputError) as e:
        export_pretrained(_FillsTheDisk(), None, out)
    assert str(e.value) == (
        f"{out}: no space left on the device; free some space or write the run elsewhere (--out DIR)."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no .tmp-model-* left
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
