"""The SLURM request (``runtime``, ``mem_mb``) a measured estimate gives a job, and when it applies.

``toolbox plan --estimate`` writes ``work/<run>/estimate/train.json`` (toolbox/results/estimate.py):
its ``slurm`` entry is the request with the stated margins, and two fingerprints say what it measured:

- ``slices``: the SHA-256 of the run's config slices (``work/<run>/config/train.yaml``,
  ``data.yaml``). The workflow's train rule asks for the estimate's request while they are
  unchanged (:func:`request_for_run`, through workflow/estimated.py).
- ``config``: the SHA-256 of the train config the calibration composed (``toolbox train --config
  work/<run>/config/train.yaml --data work/<run>/data``) without what does not change the cost
  (``UNCOSTED``: the launcher, run_dir, run_name, resume_from). ``launcher=slurm`` asks for the
  request of the estimate next to the run's data folder (``--data work/<run>/data``) or its run
  folder (``--out work/<run>/train``) when its own config has that fingerprint
  (:func:`request_for_config`): an override of the steps, the model or the data makes it another
  config, and the launcher's defaults apply.

A missing or unreadable estimate, one of an older format, or one that does not match gives ``{}``.

Only the standard library at import time: the Snakefile imports this module on every call.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ESTIMATED = ("runtime", "mem_mb")  # what an estimate measures; the rest of a request is the user's
SLICES = ("train.yaml", "data.yaml")  # the config slices (work/<run>/config/) an estimate belongs to
UNCOSTED = ("launcher", "run_dir", "run_name", "resume_from")  # left out of the config fingerprint


def estimate_file(run_dir: Path) -> Path:
    """``work/<run>/estimate/train.json`` of the workflow run folder ``work/<run>``."""
    return Path(run_dir) / "estimate" / "train.json"


def slice_digests(config_dir: Path) -> dict[str, str]:
    """The SHA-256 of each config slice present in ``work/<run>/config``."""
    return {
        name: hashlib.sha256((config_dir / name).read_bytes()).hexdigest()
        for name in SLICES
        if (config_dir / name).is_file()
    }


def config_digest(cfg: Any) -> str:
    """The fingerprint of a composed train config: its values without ``UNCOSTED``, the prepared
    data folder and its tokenizer as absolute paths (``--data work/demo/data`` from any folder)."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else dict(cfg)
    for key in UNCOSTED:
        plain.pop(key, None)
    source = (plain.get("data") or {}).get("source") or {}
    if source.get("name") == "prepared" and source.get("path"):
        source["path"] = str(Path(source["path"]).resolve())
        tokenizer = plain.get("tokenizer")
        if isinstance(tokenizer, dict) and tokenizer.get("path"):
            tokenizer["path"] = str(Path(tokenizer["path"]).resolve())
    text = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _request(record: dict[str, Any]) -> dict[str, int]:
    try:
        return {key: int(record["slurm"][key]) for key in ESTIMATED if key in record["slurm"]}
    except (KeyError, TypeError, ValueError):
        return {}


def request_for_run(run_dir: Path) -> dict[str, int]:
    """The workflow's rule: ``runtime`` and ``mem_mb`` of ``work/<run>``'s estimate while its
    config slices are unchanged, else {}."""
    record = _record(estimate_file(run_dir))
    try:
        slices = dict(record["slices"]) if record else None
    except (KeyError, TypeError, ValueError):
        return {}
    if not slices:
        return {}
    try:
        current = slice_digests(Path(run_dir) / "config")
    except OSError:
        return {}
    if any(current.get(name) != digest for name, digest in slices.items()):
        return {}
    return _request(record)


def candidates(cfg: Any) -> list[Path]:
    """Where the estimate of a config's run would be: beside its prepared data folder
    (``work/<run>/data``), beside its run folder (``work/<run>/train``)."""
    found: list[Path] = []
    source = (cfg.get("data") or {}).get("source") or {}
    if source.get("name") == "prepared" and source.get("path"):
        found.append(estimate_file(Path(str(source["path"])).parent))
    if cfg.get("run_dir"):
        found.append(estimate_file(Path(str(cfg.get("run_dir"))).parent))
    unique: list[Path] = []
    for path in found:
        if path.resolve() not in [p.resolve() for p in unique]:
            unique.append(path)
    return unique


def request_for_config(cfg: Any) -> dict[str, int]:
    """The launcher's rule: ``runtime`` and ``mem_mb`` of the first estimate (:func:`candidates`)
    measured with this very config (its ``config`` fingerprint), else {}."""
    from omegaconf.errors import OmegaConfBaseException

    digest = None
    for path in candidates(cfg):
        record = _record(path)
        if not record or not record.get("config"):
            continue
        try:
            digest = digest or config_digest(cfg)
        except OmegaConfBaseException:  # a value that does not resolve: no estimate can match
            return {}
        if record["config"] == digest:
            return _request(record)
    return {}
