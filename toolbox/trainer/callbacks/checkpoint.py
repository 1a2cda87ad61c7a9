"""The checkpoint callback: keeps the last N checkpoints and exports the final model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolbox.core.atomic import fsync_dir
from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


def export_pretrained(model, tokenizer, out: Path) -> Path:
    """Write ``model`` and ``tokenizer`` with save_pretrained into ``out``, atomically."""
    out = Path(out)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model = getattr(model, "module", model)  # unwrap DDP
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    fsync_dir(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


@CALLBACKS.register("checkpoint")
class CheckpointCallback(Callback):
    """Prunes old checkpoints and writes the final model (and tokenizer) with save_pretrained.

    Args:
        keep_last: how many of the newest checkpoints to keep (0 keeps all).
        export_dir: folder, relative to the run dir, for the final model.
    """

    def __init__(self, keep_last: int = 2, export_dir: str = "model") -> None:
        self.keep_last = keep_last
        self.export_dir = export_dir

    def on_checkpoint_saved(self, data: EventData) -> None:
        if self.keep_last:
            data.trainer.checkpointer.prune(self.keep_last)

    def on_fit_end(self, data: EventData) -> None:
        model = data.trainer.model
        if hasattr(getattr(model, "module", model), "save_pretrained"):
            export_pretrained(model, data.trainer.tokenizer, data.trainer.context.run_dir / self.export_dir)
