"""Reward functions (``REWARDS``): ``reward(prompts, completions, **fields) -> list[float | None]``.

- ``verifiable``: ``numeric_match`` (the answer as a number: ``#### N``, ``\\boxed{N}``, commas,
  units), ``format_regex``, ``exact_string``;
- ``code_exec``: runs the completion's code with the sample's tests in a sandboxed subprocess;
- ``composite``: a weighted sum of named components, with per-component metrics;
- ``learned``: a sequence-classification model's score (trained with ``objective=bradley_terry``);
- ``llm_judge``: asks any ``InferenceEngine`` for a score and parses it;
- ``decision_judge``: a judge model's decision readout (p(Yes), or a score's expected value) in one prefill.

See ``toolbox.rewards.base`` for the interface and the error policy.
"""

from toolbox.rewards import code_exec, composite, decision_judge, judge, learned, verifiable  # noqa: F401  (registers them)
