"""inspect_ai on a toolbox model: a ``ModelAPI`` provider (``toolbox``) around :class:`HarnessModel`.

The task is the same definition lm-eval runs (``toolbox.eval.harness.tasks``): each record's
rendered ``doc_to_text`` is a sample's input, ``doc_to_target`` its target; the model generates
greedily up to ``max_gen_toks`` tokens, stopping at ``until``; the scorer extracts the answer with
the task's ``regex`` filter (when it has one) and compares after the metric's normalisation, as
lm-eval's ``exact_match`` does. The model sees the last user message's text as a plain prompt
(the tiny models have no chat template).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from toolbox.eval.harness.model import HarnessModel
from toolbox.eval.harness.tasks import HarnessTask

INVALID = "[invalid]"  # lm-eval's regex filter's fallback: an output with no answer in it


@cache
def inspect_provider() -> str:
    """Register the ``toolbox`` model API with inspect_ai (once); its name."""
    from inspect_ai.model import GenerateConfig, ModelAPI, ModelOutput, modelapi

    @modelapi(name="toolbox")
    class ToolboxModelAPI(ModelAPI):
        """``get_model("toolbox/<name>", harness=HarnessModel)``: generation through toolbox."""

        def __init__(
            self,
            model_name: str,
            base_url: str | None = None,
            api_key: str | None = None,
            config: GenerateConfig = GenerateConfig(),
            harness: HarnessModel | None = None,
        ) -> None:
            super().__init__(model_name, base_url, api_key, [], config)
            if harness is None:
                raise ValueError("the toolbox model API needs harness=HarnessModel(...)")
            self.harness = harness

        async def generate(
            self, input: list[Any], tools: list[Any], tool_choice: Any, config: GenerateConfig
        ):
            prompt = next((m.text for m in reversed(input) if m.role == "user"), input[-1].text)
            text = self.harness.generate([prompt], config.max_tokens or 256, config.stop_seqs or [])[0]
            return ModelOutput.from_content(model=self.model_name, content=text)

        def max_connections(self) -> int:
            return 1  # one generation at a time: the model runs in this process

    return "toolbox"


def exact_answer_scorer(task: HarnessTask) -> Any:
    """An inspect scorer with lm-eval's ``exact_match`` semantics for ``task``."""
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer

    pattern = task.answer_pattern

    @scorer(metrics=[accuracy()], name="exact_match")
    def exact_match() -> Any:
        async def score(state: Any, target: Any) -> Any:
            answer = state.output.completion
            if pattern is not None:
                found = re.findall(pattern, answer)
                first = found[0] if found else INVALID
                answer = (next((g for g in first if g), "") if isinstance(first, tuple) else first).strip()
            ok = task.normalize(answer) == task.normalize(target.text)
            return Score(value=CORRECT if ok else INCORRECT, answer=answer)

        return score

    return exact_match()


def run_inspect(model: HarnessModel, task: HarnessTask, log_dir: Path) -> dict[str, float]:
    """Run ``task`` with inspect_ai on ``model``; ``{"exact_match": accuracy}`` (inspect's other
    metrics of the scorer as ``exact_match/<metric>``)."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import get_model
    from inspect_ai.solver import generate

    samples = [
        Sample(input=task.render("doc_to_text", r), target=task.render("doc_to_target", r), id=i)
        for i, r in enumerate(task.records())
    ]
    provider = inspect_provider()
    logs = inspect_eval(
        Task(
            dataset=MemoryDataset(samples, name=task.name),
            solver=generate(),
            scorer=exact_answer_scorer(task),
            name=task.name,
        ),
        model=get_model(f"{provider}/{task.name}", memoize=False, harness=model),
        log_dir=str(log_dir),
        display="none",
        max_tokens=task.max_tokens,
        stop_seqs=task.until or None,
        temperature=0.0,
        fail_on_error=True,
    )
    log = logs[0]
    if log.status != "success" or log.results is None:
        error = getattr(log.error, "message", None) or log.status
        raise RuntimeError(f"inspect_ai task {task.name} did not finish: {error}")
    metrics: dict[str, float] = {}
    for score in log.results.scores:
        for name, metric in score.metrics.items():
            metrics[score.name if name == "accuracy" else f"{score.name}/{name}"] = float(metric.value)
    return metrics
