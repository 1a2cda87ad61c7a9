"""One process, one device."""

from __future__ import annotations

from toolbox.core.context import RunContext
from toolbox.core.registries import STRATEGIES
from toolbox.distributed.base import Strategy


@STRATEGIES.register("single")
class SingleDevice(Strategy):
    """Train in this process on ``device`` (cpu, cuda:N)."""

    def __init__(self, context: RunContext) -> None:
        super().__init__(context)
