"""The built-in callbacks; importing this package registers them in ``CALLBACKS``."""

from toolbox.trainer.callbacks import (  # noqa: F401 - imported to register
    best_model,
    console,
    early_stopping,
    jsonl,
    memory_usage,
    profiler,
    throughput,
    tracing,
    wandb_logger,
)
from toolbox.trainer.callbacks.base import Callback

__all__ = ["Callback"]

from toolbox.trainer.callbacks import checkpoint  # noqa: F401,E402 - the lead's; last on purpose
