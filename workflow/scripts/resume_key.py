"""Print what a training's checkpoints belong to: the train slice, the data it reads and the model it
starts from.

    python workflow/scripts/resume_key.py work/<run>/config/train.yaml work/<run>/data

The train stage (``TRAIN_CMD`` in workflow/stages.py) compares this with the key its checkpoints
were written under and deletes them when it differs, so ``resume_from=auto`` resumes an interrupted
job but never continues a training whose data or starting model changed upstream (the train slice
alone names them by path, which stays the same when their content changes). The key is the
slice's text followed by one line per file of the data folder and of every local folder the slice
names as ``model.path`` or ``tokenizer.path``: its path and the SHA-256 of its bytes.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import yaml


def _file_lines(root: Path) -> list[str]:
    if root.is_file():
        return [f"{root} {_sha256(root)}"]
    return [
        f"{root}/{p.relative_to(root).as_posix()} {_sha256(p)}"
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _named_folders(cfg: dict) -> list[Path]:
    """The local folders the slice names as model.path or tokenizer.path (a hub id is not one)."""
    found = []
    for section in ("model", "tokenizer"):
        path = (cfg.get(section) or {}).get("path") if isinstance(cfg.get(section), dict) else None
        if path and Path(path).exists():
            found.append(Path(path))
    return found


def resume_key(train_cfg: Path, data: Path) -> str:
    text = train_cfg.read_text()
    cfg = yaml.safe_load(text) or {}
    lines = [text.rstrip("\n"), "# inputs"]
    for root in [data, *_named_folders(cfg)]:
        lines.extend(_file_lines(root) if root.exists() else [f"{root} missing"])
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    sys.stdout.write(resume_key(Path(argv[0]), Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
