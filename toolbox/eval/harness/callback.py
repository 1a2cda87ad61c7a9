"""``harness_eval``: a harness task on every N-th checkpoint, in a background process.

At a chosen checkpoint the callback writes the model as it is (``save_pretrained``) and the run's
config into ``<run>/harness/step_<N>/``, and starts ``toolbox eval --config ... --model ...
backend=... task=...`` there as a child process with its own small thread budget (``threads``,
default 1), so training goes on at once. One evaluation runs at a time; later ones queue. When one
finishes, its metrics (``eval/<backend>/<task>/<metric>``) are appended to ``metrics.jsonl`` as an
eval line of the checkpoint's step, so ``toolbox plot`` draws the benchmark's curve. At the end of
training the final model is evaluated too (``at_end``) and the callback waits for what is left.

    callbacks:
      harness: {name: harness_eval, backend: lm_eval, task: arithmetic, every: 1, max_examples: 200}
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


@dataclass
class _Job:
    step: int
    folder: Path
    argv: list[str]
    process: subprocess.Popen | None = None
    log: IO[bytes] | None = None


@CALLBACKS.register("harness_eval")
class HarnessEval(Callback):
    """Run an ``lm_eval`` or ``inspect_ai`` task on every ``every``-th checkpoint, in the background.

    Args:
        backend: ``lm_eval`` or ``inspect_ai``.
        task: a shipped task (``arithmetic``, ``gsm8k``) or a task YAML with local ``data_files``.
        every: evaluate every this many checkpoints (``trainer.save_every`` sets how often they come).
        max_examples: records to score (None: the task's default; see ``toolbox eval backend=``).
        engine: ``hf`` (transformers generate) or ``torch`` (ours), the engine of the evaluation.
        threads: torch/OpenMP threads of the background process.
        at_end: also evaluate the final model.
        keep_models: keep each evaluated model folder (default: deleted once scored).
        timeout: seconds to wait at the end of training for the evaluations still queued or running
            (None: until they finish); what is left after it is abandoned with a warning.
    """

    priority = 90  # after the checkpoint is written and before the loggers close

    def __init__(
        self,
        backend: str = "lm_eval",
        task: str = "arithmetic",
        every: int = 1,
        max_examples: int | None = None,
        engine: str = "hf",
        threads: int = 1,
        at_end: bool = True,
        keep_models: bool = False,
        timeout: float | None = None,
    ) -> None:
        from toolbox.core.errors import ConfigError
        from toolbox.eval.harness.evaluators import BACKENDS

        if backend not in BACKENDS:
            raise ConfigError(f"callbacks.harness_eval.backend={backend}: use one of {', '.join(BACKENDS)}.")
        if every < 1 or threads < 1:
            raise ConfigError("callbacks.harness_eval: every and threads must be >= 1.")
        self.backend, self.task, self.every = backend, task, every
        self.max_examples, self.engine, self.threads = max_examples, engine, threads
        self.at_end, self.keep_models, self.timeout = at_end, keep_models, timeout
        self.saved = 0
        self.queue: list[_Job] = []
        self.running: _Job | None = None
        self.done_steps: list[int] = []
        self.metrics_path: Path | None = None

    # -- events ------------------------------------------------------------------------------------
    def on_checkpoint_saved(self, data: EventData) -> None:
        self.saved += 1
        if self.saved % self.every == 0:
            self._submit(data)
        self._pump()

    def on_step_end(self, data: EventData) -> None:
        self._pump()

    def on_export(self, data: EventData) -> None:
        submitted = [j.step for j in self.queue] + ([self.running.step] if self.running else [])
        if self.at_end and not data.payload.get("resumed") and data.step not in submitted + self.done_steps:
            self._submit(data)
        self._pump()

    def on_fit_end(self, data: EventData) -> None:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while self.running or self.queue:
            if deadline is not None and time.monotonic() > deadline:
                left = [j.step for j in self.queue] + ([self.running.step] if self.running else [])
                warnings.warn(
                    f"harness_eval: gave up waiting for the evaluations of steps {left}", stacklevel=2
                )
                if self.running and self.running.process:
                    self.running.process.kill()
                break
            self._pump()
            time.sleep(0.2)

    # -- jobs --------------------------------------------------------------------------------------
    def _submit(self, data: EventData) -> None:
        from omegaconf import OmegaConf

        from toolbox.trainer.callbacks.checkpoint import export_pretrained

        trainer = data.trainer
        run_dir = Path(trainer.context.run_dir)
        self.metrics_path = run_dir / "metrics.jsonl"
        folder = run_dir / "harness" / f"step_{data.step:08d}"
        export_pretrained(trainer.model, trainer.tokenizer, folder / "model")
        OmegaConf.save(trainer.cfg, folder / "config.yaml")
        argv = [
            sys.executable, "-m", "toolbox.cli", "eval",
            "--config", str(folder / "config.yaml"), "--model", str(folder / "model"),
            "--out", str(folder / "eval.json"),
            f"backend={self.backend}", f"task={self.task}", f"engine={self.engine}",
            f"num_threads={self.threads}", "device=cpu",
        ]  # fmt: skip
        if self.max_examples is not None:
            argv.append(f"max_examples={self.max_examples}")
        self.queue.append(_Job(data.step, folder, argv))

    def _pump(self) -> None:
        job = self.running
        if job is not None and job.process is not None and job.process.poll() is not None:
            self._finish(job)
            self.running = None
        if self.running is None and self.queue:
            self.running = self._start(self.queue.pop(0))

    def _start(self, job: _Job) -> _Job:
        threads = str(self.threads)
        env = {
            **os.environ,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        job.log = (job.folder / "eval.log").open("wb")
        job.process = subprocess.Popen(
            job.argv, stdout=job.log, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd()
        )
        return job

    def _finish(self, job: _Job) -> None:
        if job.log is not None:
            job.log.close()
        result = job.folder / "eval.json"
        if job.process is None or job.process.returncode != 0 or not result.is_file():
            warnings.warn(
                f"harness_eval: the evaluation of step {job.step} failed (exit {job.process.returncode if job.process else '?'}); "
                f"see {job.folder / 'eval.log'}",
                stacklevel=2,
            )
            return
        metrics = json.loads(result.read_text())
        record = {
            "step": job.step,
            "split": "eval",
            **{k: v for k, v in metrics.items() if isinstance(v, int | float)},
        }
        if self.metrics_path is not None:
            with self.metrics_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        self.done_steps.append(job.step)
        if not self.keep_models:
            shutil.rmtree(job.folder / "model", ignore_errors=True)

    def pending(self) -> list[int]:
        """Steps queued or running (for tests and the console)."""
        return [j.step for j in self.queue] + ([self.running.step] if self.running else [])

    def __del__(self) -> None:  # a trainer that crashed: do not leave a child behind
        job: Any = getattr(self, "running", None)
        if job is not None and job.process is not None and job.process.poll() is None:
            job.process.kill()
