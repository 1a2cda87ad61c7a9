"""The built-in text environments (``TEXT_ENVS``): ``calculator`` and ``lookup_calculator``."""

from toolbox.rl.text_envs import calculator, lookup  # noqa: F401  (register them)
