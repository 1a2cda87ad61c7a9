"""The ``memory_writer`` callback: each evaluation of a training run, written into an episodic memory.

Each evaluation writes
  - one memory per example an evaluator got wrong (evaluators that expose ``last_failures``, such
    as ``exact_match``): "Prompt: … / Expected: … / Model answered: …", with metadata
    ``{kind: "eval_failure", run, step, evaluator, prompt, reference, output}``;
  - one summary of the evaluation's metrics (``kind: "eval_summary"``, the metrics as metadata);
and the end of the run writes a ``run_summary``. A resumed run first deletes the memories its run
wrote after the step it resumed from (they are written again), so a crash leaves no duplicates. A
later run or an agent searches the store, for example
``memory.search("12+30=", filters={"kind": "eval_failure"})``; agents write their own episodes with
``toolbox.memory.episodes``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.memory.episodes import failure_text
from toolbox.memory.store import EpisodicMemory
from toolbox.trainer.callbacks.base import Callback


def _plain_number(value: Any) -> float | None:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool | int | float) and math.isfinite(float(value)):
        return float(value)
    return None


@CALLBACKS.register("memory_writer")
class MemoryWriter(Callback):
    """Write each evaluation's failed examples (and summaries) into an episodic memory store.

    Args:
        path: the store's folder; a relative path is inside the run directory.
        embedder: an embedder config (``{name: hashing}``, ``{name: minilm}``, ...).
        index: a vector index config (``{name: exact}`` or ``{name: hnsw, ef_search: 64}``).
        max_failures: at most this many failures stored per evaluation (None: all).
        summaries: also store one summary per evaluation and one at the end of the run.
        dedupe: the store's dedupe mode ("off", "skip", "merge"); "skip" stores a failure that
            recurs unchanged across evaluations once.
        max_items: the store's size limit (None: none).
        eviction: the store's eviction policy ("oldest", "lru", "importance").
    """

    def __init__(
        self,
        path: str = "memory",
        embedder: dict[str, Any] | None = None,
        index: dict[str, Any] | None = None,
        max_failures: int | None = 100,
        summaries: bool = True,
        dedupe: str = "off",
        max_items: int | None = None,
        eviction: str = "oldest",
    ) -> None:
        self.path = path
        self.embedder = embedder or {"name": "hashing"}
        self.index = index or {"name": "exact"}
        self.max_failures = max_failures
        self.summaries = summaries
        self.store_settings = {"dedupe": dedupe, "max_items": max_items, "eviction": eviction}
        self.memory: EpisodicMemory | None = None
        self.written = 0

    def _open(self, data: EventData) -> EpisodicMemory:
        if self.memory is None:
            folder = Path(self.path)
            if not folder.is_absolute():
                folder = Path(data.trainer.context.run_dir) / folder
            self.memory = EpisodicMemory(
                folder, embedder=self.embedder, index=self.index, **self.store_settings
            )
        return self.memory

    def _run_name(self, data: EventData) -> str:
        return Path(data.trainer.context.run_dir).name

    def on_fit_start(self, data: EventData) -> None:
        memory = self._open(data)
        resumed = data.payload.get("resumed_from")
        if resumed is not None and {"run", "step"} <= memory.fields:
            # a resumed run evaluates the steps after its checkpoint again: drop what it wrote then
            memory.delete_where({"run": self._run_name(data), "step": {"gt": int(resumed)}})

    def on_eval_end(self, data: EventData) -> None:
        memory = self._open(data)
        run = self._run_name(data)
        texts, metas = [], []
        for evaluator in getattr(data.trainer, "evaluators", []):
            failures = getattr(evaluator, "last_failures", None) or []
            name = getattr(type(evaluator), "_registry_name", type(evaluator).__name__)
            for f in failures[: self.max_failures]:
                texts.append(failure_text(f["prompt"], f["reference"], f["output"]))
                metas.append({"kind": "eval_failure", "run": run, "step": data.step, "evaluator": name, **f})
        if self.summaries:
            metrics = {
                k: v for k, v in ((k, _plain_number(v)) for k, v in data.metrics.items()) if v is not None
            }
            shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
            texts.append(f"Evaluation of run {run} at step {data.step}: {shown or 'no metrics'}")
            metas.append({"kind": "eval_summary", "run": run, "step": data.step, **metrics})
        if texts:
            memory.add_many(texts, metas)
            self.written += len(texts)

    def on_fit_end(self, data: EventData) -> None:
        if self.memory is None:
            return
        if self.summaries:
            metrics = {
                k: v for k, v in ((k, _plain_number(v)) for k, v in data.metrics.items()) if v is not None
            }
            shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
            stopped = " (stopped early)" if data.payload.get("stopped_early") else ""
            self.memory.add(
                f"Run {self._run_name(data)} finished at step {data.step}{stopped}: {shown or 'no metrics'}",
                metadata={"kind": "run_summary", "run": self._run_name(data), "step": data.step, **metrics},
            )
            self.written += 1
        self.close()

    def close(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None
