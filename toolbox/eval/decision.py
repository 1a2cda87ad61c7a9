"""Decision metrics and the ``decision`` evaluator.

- ``accuracy``: the most likely option is the label.
- ``expected_calibration_error``: confidence (the top probability) against accuracy, in equal-width
  bins, weighted by the bin's share of items.
- ``flip_rate``: how often the answer changes when the options are listed in reverse order.
- ``coverage_at_risk``: the largest share of items, the most confident first, that can be answered
  automatically with an error rate of at most ``risk`` (5 %) among them (AnyJev's "auto-decidable").

The evaluator reads every held-out record with ``DecisionReader`` at each level, in the order given
and reversed, and reports ``eval/<level>_<metric>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


def accuracy(probs: np.ndarray, labels: Sequence[int]) -> float:
    return float(np.mean(np.argmax(probs, axis=1) == np.asarray(labels)))


def expected_calibration_error(probs: np.ndarray, labels: Sequence[int], bins: int = 15) -> float:
    """``sum_b |acc_b - conf_b| * n_b / N`` over ``bins`` equal-width confidence bins (right-closed)."""
    probs = np.asarray(probs, dtype=np.float64)
    conf = probs.max(axis=1)
    hit = (probs.argmax(axis=1) == np.asarray(labels)).astype(np.float64)
    which = np.clip(np.ceil(conf * bins).astype(int) - 1, 0, bins - 1)
    total = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            total += abs(hit[sel].mean() - conf[sel].mean()) * sel.sum()
    return float(total / len(conf))


def flip_rate(probs: np.ndarray, probs_reordered: np.ndarray) -> float:
    """Share of items whose answer differs between two orders (both given by option)."""
    return float(np.mean(np.argmax(probs, axis=1) != np.argmax(probs_reordered, axis=1)))


def coverage_at_risk(probs: np.ndarray, labels: Sequence[int], risk: float = 0.05) -> float:
    """The largest share of items, most confident first, whose error rate is at most ``risk``."""
    probs = np.asarray(probs, dtype=np.float64)
    order = np.argsort(-probs.max(axis=1), kind="stable")
    wrong = (probs.argmax(axis=1) != np.asarray(labels))[order].astype(np.float64)
    rate = np.cumsum(wrong) / np.arange(1, len(wrong) + 1)
    ok = np.nonzero(rate <= risk + 1e-12)[0]
    return float((ok.max() + 1) / len(wrong)) if len(ok) else 0.0


def decision_metrics(
    probs: np.ndarray, probs_reversed: np.ndarray, labels: Sequence[int], risk: float = 0.05, bins: int = 15
) -> dict[str, float]:
    """accuracy, ece, flip_rate and coverage (at ``risk``) of one level's readout."""
    return {
        "accuracy": accuracy(probs, labels),
        "ece": expected_calibration_error(probs, labels, bins),
        "flip_rate": flip_rate(probs, probs_reversed),
        f"coverage_at_{round(risk * 100):d}": coverage_at_risk(probs, labels, risk),
    }


def evaluate_decisions(
    reader_factory: Any,
    records: Sequence[dict[str, Any]],
    levels: Sequence[str] = ("raw", "L0"),
    question: str = "Which option applies?",
    state_field: str = "text",
    options_field: str = "options",
    label_field: str = "label",
    question_field: str = "question",
    risk: float = 0.05,
    bins: int = 15,
) -> dict[str, float]:
    """``{<level>_<metric>: value}`` over labelled records; ``reader_factory()`` gives a fresh reader
    (so a level's batch prior is estimated on these records alone, once per order)."""
    from toolbox.decision import Question

    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault((str(r.get(question_field) or question), tuple(r[options_field])), []).append(i)
    out: dict[str, list[tuple[float, int]]] = {}
    for level in levels:
        for (text, options), idx in groups.items():
            q = Question.choice(text, list(options))
            states = [records[i][state_field] for i in idx]
            labels = [_index(records[i][label_field], q) for i in idx]
            probs = np.stack([d.probs for d in reader_factory().decide_batch(states, q, level=level)])
            back = np.stack(
                [d.probs for d in reader_factory().decide_batch(states, q.reversed(), level=level)]
            )
            for name, value in decision_metrics(probs, back[:, ::-1], labels, risk, bins).items():
                out.setdefault(f"{level}_{name}", []).append((value, len(idx)))
    return {k: sum(v * n for v, n in vals) / sum(n for _, n in vals) for k, vals in out.items()}


def _index(label: Any, q: Any) -> int:
    return q.options.index(label) if isinstance(label, str) else int(label)


@EVALUATORS.register("decision_metrics")
class DecisionEvaluator:
    """Decision metrics of the model's readout on the held-out records, per level.

    Reports ``eval/<level>_accuracy``, ``_ece``, ``_flip_rate`` (options reversed) and
    ``_coverage_at_5`` (the share answerable at <= 5 % error) for each level.

    Args:
        levels: the levels to read ("raw", "L0").
        max_examples: evaluate on the first this many records (None: all).
        question: the question text for records without one.
        state_field: record field of the state.
        options_field: record field of the options.
        label_field: record field of the label (option index or text).
        question_field: record field of the question text.
        risk: the error rate of the coverage metric.
        bins: confidence bins of the ECE.
        system: the readout's system message (null: the reader's default).
        prompt_format: "chat" or "plain".
        max_batch_size: rows per forward of the torch backend.
    """

    def __init__(
        self,
        levels: Sequence[str] = ("raw", "L0"),
        max_examples: int | None = None,
        question: str = "Which option applies?",
        state_field: str = "text",
        options_field: str = "options",
        label_field: str = "label",
        question_field: str = "question",
        risk: float = 0.05,
        bins: int = 15,
        system: str | None = None,
        prompt_format: str = "chat",
        max_batch_size: int = 64,
    ) -> None:
        self.levels = list(levels)
        self.max_examples = max_examples
        self.fields = {
            "question": question,
            "state_field": state_field,
            "options_field": options_field,
            "label_field": label_field,
            "question_field": question_field,
        }
        self.risk, self.bins = risk, bins
        self.system, self.prompt_format = system, prompt_format
        self.max_batch_size = max_batch_size

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.decision import DecisionReader
        from toolbox.decision.backends.torch import TorchDecisionBackend
        from toolbox.decision.prompt import DEFAULT_SYSTEM

        model = parts.strategy.unwrap(parts.model)
        records = parts.test_records[: self.max_examples] if self.max_examples else parts.test_records
        was_training = model.training
        model.eval()
        try:
            backend = TorchDecisionBackend(model, parts.tokenizer, self.max_batch_size)
            system = self.system or DEFAULT_SYSTEM

            def reader() -> DecisionReader:
                return DecisionReader(backend, system=system, prompt_format=self.prompt_format)  # type: ignore[arg-type]

            metrics = evaluate_decisions(
                reader, records, self.levels, risk=self.risk, bins=self.bins, **self.fields
            )
        finally:
            model.train(was_training)
        return {f"eval/{k}": v for k, v in metrics.items()}
