"""Trace logging: every GRPO rollout and every evaluation generation as ActionRecords in a store.

Each rollout round (the GRPO trainer's ROLLOUT_END event) becomes, per prompt, a ``decision``
record ``grpo_group`` (the prompt, the step) with one ``llm_call`` record ``rollout`` per
completion under it: the prompt and completion as GenAI messages, the finish reason, token
counts, and scores ``reward`` (the weighted total) and ``reward/<component>`` for each reward
function (source ``reward``); the advantage is in ``metadata``. The group's completions are
siblings, so ``toolbox traces to-dataset --format preference --score reward`` pairs them. Each
evaluation of a generating evaluator (``exact_match``) adds one ``llm_call`` ``eval/<evaluator>``
per held-out prompt, scored ``correct`` (source ``eval``), tagged ``eval``.

The session id of a record is a hash of its prompt, so a split by session keeps every generation
of one prompt on the same side.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path
from typing import Any

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.tracing.record import ActionRecord, Score, new_span_id, new_trace_id, text_message
from toolbox.trainer.callbacks.base import Callback


def _session(prompt: Any) -> str:
    return "prompt-" + hashlib.blake2b(str(prompt).encode(), digest_size=8).hexdigest()


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(prompt)


@CALLBACKS.register("traces")
class TraceRecorder(Callback):
    """Record GRPO rollouts (prompt, completion, reward per function) and evaluation generations in a trace store.

    Args:
        path: the store (``.sqlite`` or ``.jsonl``); relative paths are inside the run directory.
        rollouts: record GRPO rollouts.
        evaluations: record the generations of evaluators that keep them (exact_match).
        every: record every this many rounds (1: all).
        redact: pass records through the built-in redactor.
        flush_every: records buffered between writes.
    """

    priority = 50

    def __init__(
        self,
        path: str = "traces.sqlite",
        rollouts: bool = True,
        evaluations: bool = True,
        every: int = 1,
        redact: bool = True,
        flush_every: int = 512,
    ) -> None:
        self.path = path
        self.rollouts = rollouts
        self.evaluations = evaluations
        self.every = max(1, int(every))
        self.redact = redact
        self.flush_every = flush_every
        self.tracer = None
        self.recorded = 0

    def _open(self, data: EventData):
        if self.tracer is None:
            from toolbox.tracing.redact import default_redactor
            from toolbox.tracing.tracer import Tracer

            path = Path(self.path)
            if not path.is_absolute():
                path = Path(data.trainer.context.run_dir) / path
            run = str(data.trainer.cfg.get("run_name") or "run")
            self.model_name = run
            self.tracer = Tracer(
                path,
                redact=default_redactor if self.redact else None,
                flush_every=self.flush_every,
                tags=[run],
            )
        return self.tracer

    def on_fit_start(self, data: EventData) -> None:
        self._open(data)

    def on_rollout_end(self, data: EventData) -> None:
        if not self.rollouts or data.step % self.every:
            return
        tracer = self._open(data)
        rollout = data.payload["rollout"]
        names = list(getattr(getattr(data.trainer, "reward", None), "names", []) or [])
        per_func = rollout.rewards_per_func.tolist() if rollout.rewards_per_func is not None else None
        totals = rollout.rewards.tolist() if rollout.rewards is not None else None
        advantages = rollout.advantages if rollout.advantages is not None else None
        lengths = rollout.completion_lengths.tolist()
        prompt_lengths = rollout.prompt_mask.sum(dim=1).tolist()
        n = rollout.num_generations
        now = time.time()
        for g in range(len(rollout) // n):
            prompt = rollout.prompts[g * n]
            trace, session = new_trace_id(), _session(prompt)
            group = ActionRecord(
                "decision", "grpo_group", id=new_span_id(), trace_id=trace, session_id=session,
                inputs=_text(prompt), start_time=now, end_time=now, metadata={"step": data.step},
                tags=["grpo", self.model_name],
            )  # fmt: skip
            tracer.emit(group)
            for k in range(n):
                i = g * n + k
                scores = []
                if totals is not None and not math.isnan(totals[i]):
                    scores.append(Score("reward", totals[i], source="reward", timestamp=now))
                for j, name in enumerate(names):
                    if per_func is not None and not math.isnan(per_func[i][j]):
                        scores.append(Score(f"reward/{name}", per_func[i][j], source="reward", timestamp=now))
                meta: dict[str, Any] = {"step": data.step, "generation": k}
                if advantages is not None:
                    a = advantages[i]
                    meta["advantage"] = float(a.float().mean()) if a.dim() else float(a)
                for key, values in rollout.fields.items():
                    v = values[i]
                    if isinstance(v, str | int | float | bool) and key != "prompt":
                        meta[key] = v
                tracer.emit(
                    ActionRecord(
                        "llm_call",
                        "rollout",
                        id=new_span_id(),
                        parent_id=group.id,
                        trace_id=trace,
                        session_id=session,
                        inputs=[text_message("user", _text(prompt))],
                        outputs=[text_message("assistant", rollout.completions[i])],
                        model=self.model_name,
                        operation="text_completion",
                        input_tokens=int(prompt_lengths[i]),
                        output_tokens=int(lengths[i]),
                        finish_reason=rollout.finish_reasons[i] if rollout.finish_reasons else None,
                        start_time=now,
                        end_time=now,
                        scores=scores,
                        metadata=meta,
                        tags=["grpo", "rollout", self.model_name],
                    )  # fmt: skip
                )
                self.recorded += 1

    def on_eval_end(self, data: EventData) -> None:
        if not self.evaluations:
            return
        tracer = self._open(data)
        now = time.time()
        for evaluator in getattr(data.trainer, "evaluators", None) or ():
            generations = getattr(evaluator, "last_generations", None)
            if not generations:
                continue
            name = getattr(type(evaluator), "_registry_name", type(evaluator).__name__)
            for gen in generations:
                tracer.emit(
                    ActionRecord(
                        "llm_call",
                        f"eval/{name}",
                        id=new_span_id(),
                        trace_id=new_trace_id(),
                        session_id=_session(gen["prompt"]),
                        inputs=[text_message("user", _text(gen["prompt"]))],
                        outputs=[text_message("assistant", gen["output"])],
                        model=self.model_name,
                        operation="text_completion",
                        start_time=now,
                        end_time=now,
                        scores=[Score("correct", bool(gen["correct"]), source="eval", timestamp=now)],
                        metadata={"step": data.step, "reference": gen["reference"]},
                        tags=["eval", self.model_name],
                    )  # fmt: skip
                )
                self.recorded += 1
            evaluator.last_generations = None
        tracer.flush()

    def on_checkpoint_saved(self, data: EventData) -> None:
        if self.tracer is not None:
            self.tracer.flush()

    def on_fit_end(self, data: EventData) -> None:
        if self.tracer is not None:
            self.tracer.close()
            self.tracer = None
