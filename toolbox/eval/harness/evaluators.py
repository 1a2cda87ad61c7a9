"""The ``lm_eval`` and ``inspect_ai`` evaluators: a harness task on the run's model, like any evaluator.

In a config: ``eval.<label>: {name: lm_eval, task: arithmetic}``; from the command line:
``toolbox eval --run outputs/demo backend=lm_eval task=arithmetic`` (:func:`use_harness`). Their
metrics are ``eval/<backend>/<task>/<metric>`` (``eval/lm_eval/arithmetic/exact_match``), so they
land in eval.json, ``expect:`` and the report as any other metric.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components

BACKENDS = ("lm_eval", "inspect_ai")
OPTIONS = ("backend", "task", "engine", "base_url", "max_examples", "gsm8k_path")


class _Harness:
    """A task of a standard harness on the run's model (in process, or ``toolbox serve`` over HTTP).

    Args:
        task: a shipped task (``arithmetic``: the run's held-out records; ``gsm8k``) or a task YAML
            whose ``data_files`` are local.
        engine: how the model generates: ``{name: hf}`` (transformers ``generate``, the default),
            ``{name: torch}`` (our engine), or ``{name: http, base_url: http://127.0.0.1:8000/v1}``.
        max_examples: score the first this many records (None: all).
        gsm8k_path: the GSM8K jsonl the ``gsm8k`` task reads when the run's own data is not GSM8K.
    """

    backend = ""

    def __init__(
        self,
        task: str = "arithmetic",
        engine: dict[str, Any] | None = None,
        max_examples: int | None = None,
        gsm8k_path: str = "../shared/data/gsm8k/train.jsonl",
    ) -> None:
        self.task = task
        self.engine = dict(engine) if engine else {"name": "hf"}
        self.max_examples = max_examples
        self.gsm8k_path = gsm8k_path

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.eval.harness.model import harness_model
        from toolbox.eval.harness.tasks import resolve_task

        remote = self.engine.get("name") == "http"
        model = None if remote else parts.strategy.unwrap(parts.model)
        harness = harness_model(self.engine, model=model, tokenizer=parts.tokenizer)
        records = list(parts.test_records) if parts.splits is not None else None
        with tempfile.TemporaryDirectory(prefix="toolbox-harness-") as tmp:
            task = resolve_task(self.task, records, Path(tmp), self.max_examples, self.gsm8k_path)
            scores = self.run(harness, task, Path(tmp))
        return {f"eval/{self.backend}/{task.name}/{k}": v for k, v in sorted(scores.items())}

    def run(self, harness: Any, task: Any, workdir: Path) -> dict[str, float]:
        raise NotImplementedError


@EVALUATORS.register("lm_eval")
class LmEvalTask(_Harness):
    __doc__ = "lm-evaluation-harness (``lm-eval``): " + (_Harness.__doc__ or "")
    backend = "lm_eval"

    def run(self, harness: Any, task: Any, workdir: Path) -> dict[str, float]:
        from toolbox.eval.harness.lm_eval_backend import run_lm_eval

        return run_lm_eval(harness, task)


@EVALUATORS.register("inspect_ai")
class InspectTask(_Harness):
    __doc__ = "inspect_ai (``inspect-ai``): " + (_Harness.__doc__ or "")
    backend = "inspect_ai"

    def run(self, harness: Any, task: Any, workdir: Path) -> dict[str, float]:
        from toolbox.eval.harness.inspect_backend import run_inspect

        return run_inspect(harness, task, workdir / "logs")


def split_harness_options(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """``backend=``, ``task=``, ``engine=``, ... out of ``toolbox eval``'s overrides (only when
    ``backend=`` is one of them; otherwise the overrides are left as they are)."""
    if not any(o.startswith("backend=") for o in overrides):
        return overrides, {}
    rest, options = [], {}
    for o in overrides:
        key, _, value = o.partition("=")
        if key in OPTIONS:
            options[key] = value
        else:
            rest.append(o)
    return rest, options


def use_harness(cfg: DictConfig, options: dict[str, str]) -> DictConfig:
    """Replace the run's evaluators by the one harness task ``options`` name.

    With the ``arithmetic`` task and no ``max_examples``, the run's own ``exact_match`` sample size
    is kept (the demo scores 200 held-out problems), so the two numbers count the same problems.
    """
    backend = options.get("backend", "")
    if backend not in BACKENDS:
        raise ConfigError(
            f"backend={backend}: unknown evaluation backend; use one of: {', '.join(BACKENDS)}."
        )
    if not options.get("task"):
        raise ConfigError(
            "backend=...: which task? add task=arithmetic, task=gsm8k or task=path/to/task.yaml."
        )
    spec: dict[str, Any] = {"name": backend, "task": options["task"]}
    engine = options.get("engine") or ("http" if options.get("base_url") else "hf")
    spec["engine"] = {
        "name": engine,
        **({"base_url": options["base_url"]} if options.get("base_url") else {}),
    }
    limit = options.get("max_examples")
    if limit is None and options["task"] == "arithmetic":
        limit = OmegaConf.select(cfg, "eval.exact_match.max_examples")
    if limit is not None:
        spec["max_examples"] = int(limit)
    if options.get("gsm8k_path"):
        spec["gsm8k_path"] = options["gsm8k_path"]
    with open_dict(cfg):
        cfg.eval = {backend: spec}
    return cfg
