"""A model written for ``from_pretrained``: ``save_pretrained`` into a temp folder, fsync, rename.

The checkpoint callback exports a run's final model with it, and ``nn.adapters`` a merged model.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolbox.core.atomic import fsync_dir


def export_pretrained(model, tokenizer, out: Path, state_dict: dict | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` with save_pretrained into ``out``, atomically.

    ``state_dict``: the full weights to write instead of ``model.state_dict()`` (a model sharded by
    FSDP passes the consolidated state its strategy gathered).
    """
    out = Path(out)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model = getattr(model, "module", model)  # unwrap DDP
    model.save_pretrained(tmp, state_dict=state_dict)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    fsync_dir(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
