"""Standard evaluation harnesses as backends: lm-evaluation-harness (``lm_eval``) and inspect_ai.

Both drive a toolbox model through one adapter (:class:`~toolbox.eval.harness.model.HarnessModel`):
in process (the trained model with transformers ``generate`` or our engine) or over HTTP (``toolbox
serve``'s OpenAI endpoint). Tasks come from local files only (``tasks/``: the project's own data;
or a user's task file whose ``data_files`` are local), so nothing reaches a hub.

- ``evaluators``: the ``lm_eval`` and ``inspect_ai`` evaluators (``eval.<label>: {name: lm_eval,
  task: arithmetic}``), which ``toolbox eval`` and the workflow's eval stage run like any other;
- ``lm_eval_backend`` / ``inspect_backend``: the two libraries' model classes around the adapter;
- ``tasks``: the shipped task definitions and the data files they read;
- ``callback``: ``harness_eval``, a task every N checkpoints in a background process.
"""
