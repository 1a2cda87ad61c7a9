"""lm-evaluation-harness on a toolbox model: an ``lm_eval.api.model.LM`` around :class:`HarnessModel`.

``ToolboxLM`` is registered with lm-eval as model ``toolbox`` (when this module's ``lm_eval_model``
first runs). It answers the three request types: ``generate_until`` (greedy, the task's ``until``
and ``max_gen_toks``), ``loglikelihood`` and ``loglikelihood_rolling`` (in process only).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from toolbox.eval.harness.model import HarnessModel
from toolbox.eval.harness.tasks import HarnessTask


@cache
def lm_eval_model() -> type:
    """The ``LM`` subclass (built on first use: lm-eval is imported only when a task runs)."""
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model

    @register_model("toolbox")
    class ToolboxLM(LM):
        """A toolbox model for lm-eval: ``ToolboxLM(HarnessModel)`` (see ``toolbox.eval.harness.model``)."""

        def __init__(self, model: HarnessModel, batch_size: int = 64) -> None:
            super().__init__()
            self.harness = model
            self.batch_size = batch_size

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            outputs: list[str] = []
            # requests of one task share their generation settings; group them so each call batches
            groups: dict[tuple, list[int]] = {}
            for i, request in enumerate(requests):
                _, kwargs = request.args
                until = kwargs.get("until") or []
                key = (
                    tuple([until] if isinstance(until, str) else until),
                    int(kwargs.get("max_gen_toks", 256)),
                )
                groups.setdefault(key, []).append(i)
            outputs = [""] * len(requests)
            for (until, max_tokens), indices in groups.items():
                contexts = [requests[i].args[0] for i in indices]
                for i, text in zip(indices, self.harness.generate(contexts, max_tokens, until), strict=True):
                    outputs[i] = text
            return outputs

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            return self.harness.loglikelihood([tuple(r.args) for r in requests])

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            return self.harness.loglikelihood_rolling([r.args[0] for r in requests])

    return ToolboxLM


def run_lm_eval(model: HarnessModel, task: HarnessTask, seed: int = 0) -> dict[str, float]:
    """Run ``task`` with lm-eval on ``model``; its metrics as ``{metric: value}`` (stderr left out;
    a metric under a filter other than the task's only one is named ``metric/filter``)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    results = simple_evaluate(
        model=lm_eval_model()(model),
        tasks=[task.config],
        task_manager=TaskManager(include_defaults=False),
        bootstrap_iters=0,
        log_samples=False,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    scores = (results or {}).get("results", {}).get(task.name, {})
    filters = {key.split(",", 1)[1] for key in scores if "," in key}
    metrics: dict[str, float] = {}
    for key, value in scores.items():
        if "," not in key or "_stderr" in key or not isinstance(value, int | float):
            continue
        metric, flt = key.split(",", 1)
        metrics[metric if len(filters) == 1 or flt == "none" else f"{metric}/{flt}"] = float(value)
    return metrics
