"""A model written for ``from_pretrained``: ``save_pretrained`` into a temp folder, fsync, rename.

A write that fails (a full disk, a read-only folder) removes the temp folder at once and raises an
``OutputError`` naming the model folder and the fix; an earlier model in ``out`` stays as it was.

The checkpoint callback exports a run's final model with it, and ``nn.adapters`` a merged model.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolbox.core.atomic import fsync_dir
from toolbox.core.output import write_error, write_failure


def export_pretrained(model, tokenizer, out: Path, state_dict: dict | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` with save_pretrained into ``out``, atomically.

    ``state_dict``: the full weights to write instead of ``model.state_dict()`` (a model sharded by
    FSDP passes the consolidated state its strategy gathered).
    """
    out = Path(out)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model = getattr(model, "module", model)  # unwrap DDP
    try:
        model.save_pretrained(tmp, state_dict=state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        fsync_dir(tmp)
    except BaseException as e:  # a full disk, an interrupt: no half-written model folder left
        shutil.rmtree(tmp, ignore_errors=True)
        failure = write_error(e)
        if failure is not None:
            raise write_failure(failure, out) from None
        raise
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
