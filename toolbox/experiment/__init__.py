"""Compose a config, validate it, build every component through its registry, run the trainer.

::

    cfg = load_config(["experiment=sft_arith", "trainer.max_steps=50"])
    parts = ExperimentBuilder.from_config(cfg).build()
    parts.trainer.fit()

``run_experiment(cfg)`` does the last two lines; ``compose_run`` is what the commands call (a
``--config`` file or a fresh composition, overrides, ``--out``, ``--data``, validation).

One module per step: ``compose`` (``load_config``, ``fill_defaults``, ``compose_run``),
``validate`` (``validate_config``), ``build`` (``ExperimentBuilder``, ``Components``,
``run_experiment``). What the builder injects is one list, ``INJECTED`` in ``schema`` (from
``COMPONENT_NODES``, ``TOKENIZER_FACTS`` and ``DATA_FACTS``), read by the builder,
``validate_config`` and ``toolbox catalog``: a new data fact (an environment's ``obs_dim``, a
graph's ``in_dim``) is one line in ``DATA_FACTS``.
"""

from toolbox.experiment.build import ExperimentBuilder, run_experiment
from toolbox.experiment.compose import compose_run, load_config

__all__ = ["ExperimentBuilder", "compose_run", "load_config", "run_experiment"]
