"""Harness tasks from local files: the shipped definitions (``tasks/*.yaml``) or a user's task YAML.

A task is an lm-evaluation-harness task config (YAML) whose data is local: ``dataset_path: json``
(or csv, parquet, text) with ``data_files`` on this machine. The shipped tasks read the project's
own data, written at run time to a jsonl file their ``data_files`` then names:

- ``arithmetic``: the run's held-out records (``prompt``, ``completion``), as ``exact_match`` reads them;
- ``gsm8k``: the run's held-out records when the run trains on GSM8K, else the held-out split of
  the ``gsm8k`` source read from ``gsm8k_path`` (``../shared/data/gsm8k/train.jsonl``).

inspect_ai runs the same definition (:class:`HarnessTask` reads what it needs from the config), so
the two harnesses score the same prompts with the same stop strings and answer extraction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolbox.core.atomic import atomic_write_text
from toolbox.core.errors import ConfigError, DataError

TASKS_DIR = Path(__file__).parent / "tasks"
SHIPPED = tuple(sorted(p.stem for p in TASKS_DIR.glob("*.yaml")))
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")
PLACEHOLDER = "RECORDS"


@dataclass
class HarnessTask:
    """One task: its lm-eval config (``data_files`` local) and the parts inspect_ai needs."""

    name: str
    config: dict[str, Any]

    @property
    def data_file(self) -> Path:
        files = self.config["dataset_kwargs"]["data_files"]
        split = self.config.get("test_split", "test")
        chosen = files[split] if isinstance(files, dict) else files
        return Path(chosen[0] if isinstance(chosen, list) else chosen)

    def records(self) -> list[dict[str, Any]]:
        with self.data_file.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def render(self, template_key: str, record: dict[str, Any]) -> str:
        from jinja2 import Template

        return Template(str(self.config[template_key]), keep_trailing_newline=True).render(**record)

    @property
    def max_tokens(self) -> int:
        return int((self.config.get("generation_kwargs") or {}).get("max_gen_toks", 256))

    @property
    def until(self) -> list[str]:
        until = (self.config.get("generation_kwargs") or {}).get("until") or []
        return [until] if isinstance(until, str) else list(until)

    @property
    def answer_pattern(self) -> str | None:
        """The first ``regex`` filter's pattern (the answer's extraction), None where output is the answer."""
        for group in self.config.get("filter_list") or []:
            for step in group.get("filter") or []:
                if step.get("function") == "regex":
                    return step.get("regex_pattern", r"#### (\-?[0-9\.\,]+)")
        return None

    def normalize(self, text: str) -> str:
        """What ``exact_match`` compares: stripped, the metric's ``regexes_to_ignore`` removed."""
        metric = next(
            (m for m in self.config.get("metric_list") or [] if m.get("metric") == "exact_match"), {}
        )
        for pattern in metric.get("regexes_to_ignore") or []:
            text = re.sub(pattern, "", text)
        return text.strip().lower() if metric.get("ignore_case") else text.strip()


def resolve_task(
    task: str,
    records: list[dict[str, Any]] | None,
    workdir: Path,
    max_examples: int | None = None,
    gsm8k_path: str = "../shared/data/gsm8k/train.jsonl",
) -> HarnessTask:
    """The task named ``task`` (a shipped name or a task YAML file), its data written under ``workdir``.

    ``records``: the run's held-out records (None where there is no run).
    """
    path = Path(task).expanduser()
    if task.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise ConfigError(f"task={task}: no such file; give a task YAML or one of: {', '.join(SHIPPED)}.")
        return _user_task(path)
    if task not in SHIPPED:
        raise ConfigError(f"task={task}: unknown task; shipped: {', '.join(SHIPPED)} (or a task YAML file).")
    config = yaml.safe_load((TASKS_DIR / f"{task}.yaml").read_text())
    rows = _gsm8k_records(records, gsm8k_path) if task == "gsm8k" else _run_records(task, records)
    rows = rows[:max_examples] if max_examples else rows
    data = Path(workdir) / f"{task}.jsonl"
    atomic_write_text(data, "".join(json.dumps(r, default=str) + "\n" for r in rows))
    config["dataset_kwargs"]["data_files"] = {config.get("test_split", "test"): str(data)}
    return HarnessTask(task, config)


def _run_records(task: str, records: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not records or not {"prompt", "completion"} <= set(records[0]):
        raise ConfigError(
            f"task={task} scores the run's held-out records (prompt, completion); this run has "
            f"{'none' if not records else 'records with ' + ', '.join(sorted(records[0]))}. Evaluate a run "
            "trained on an arithmetic source (experiment=demo or sft_arith)."
        )
    return [{"prompt": r["prompt"], "completion": str(r["completion"])} for r in records]


def _gsm8k_records(records: list[dict[str, Any]] | None, path: str) -> list[dict[str, Any]]:
    from toolbox.data.sources.gsm8k import FINAL, gsm8k

    # the run's own records where it trains on GSM8K (worked answers ending "#### <number>"); an
    # arithmetic run's records also hold an ``answer``, but they are not GSM8K
    if records and all("answer" in r and FINAL in str(r.get("completion", "")) for r in records):
        rows = records
    else:
        try:
            rows = gsm8k(path=path).test
        except DataError as err:
            raise DataError(f"task=gsm8k: {err} (or set gsm8k_path=FILE)") from None
    return [{"prompt": r["prompt"], "answer": str(r["answer"])} for r in rows]


def _user_task(path: Path) -> HarnessTask:
    config = yaml.safe_load(path.read_text()) or {}
    name = config.get("task")
    if not isinstance(name, str):
        raise ConfigError(f"task={path}: the YAML names no task (task: NAME); see the shipped {TASKS_DIR}.")
    builder = str(config.get("dataset_path", ""))
    if builder not in LOCAL_BUILDERS and not Path(builder).expanduser().exists():
        raise ConfigError(
            f"task={path}: dataset_path {builder!r} is not local; use dataset_path: json (or "
            f"{', '.join(LOCAL_BUILDERS[1:])}) with dataset_kwargs.data_files on this machine."
        )
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if builder in LOCAL_BUILDERS:
        if not files:
            raise ConfigError(
                f"task={path}: dataset_kwargs.data_files is missing; name the local data files."
            )
        config["dataset_kwargs"]["data_files"] = _local_files(files, path.parent, path)
    return HarnessTask(name, config)


def _local_files(files: Any, base: Path, source: Path) -> Any:
    if isinstance(files, dict):
        return {k: _local_files(v, base, source) for k, v in files.items()}
    if isinstance(files, list):
        return [_local_files(v, base, source) for v in files]
    file = Path(str(files)).expanduser()
    file = file if file.is_absolute() else base / file
    if not file.is_file():
        raise DataError(f"task={source}: data file {file} does not exist; data_files must be local files.")
    return str(file)
