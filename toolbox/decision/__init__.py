"""Decision readouts (AnyJev-style) and decision training objectives.

A typed question (``Question.choice`` / ``yes_no`` / ``score``) about a state is answered with a
distribution over its options, read from the label tokens at the answer position in one prefill
(``DecisionReader``), at a level: ``raw``, ``L0`` (rotations + a label-free prior), ``L1``
(temperature, fitted on labels), ``L2`` (a closed-form head on a hidden state). Backends: our torch
engine (rotations share one prefix prefill), transformers, any OpenAI-compatible server (top-k
log-probs), AnyJev itself. ``toolbox.decision.objectives`` trains a model's raw readout (decision
cross entropy; self-distillation onto its own L0 with a permutation-consistency term).
"""

from toolbox.decision.prompt import ChatTemplateError, LabelTokenError
from toolbox.decision.question import Question, QuestionError
from toolbox.decision.reader import DecisionReader
from toolbox.decision.result import LEVELS, Decision, LevelError

__all__ = [
    "LEVELS",
    "ChatTemplateError",
    "Decision",
    "DecisionReader",
    "LabelTokenError",
    "LevelError",
    "Question",
    "QuestionError",
]
