"""Retry with exponential backoff, for calls that fail transiently (HTTP, file systems, SLURM)."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


def retry(
    attempts: int = 3,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    exceptions: tuple[type[BaseException], ...] = (Exception,),
    jitter: float = 0.1,
    sleep: Callable[[float], None] = time.sleep,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: call again on ``exceptions``, waiting base_delay * 2**k (capped), then re-raise.

    Args:
        attempts: total number of calls, the first one included.
        base_delay: seconds before the second call; doubled after every failure.
        max_delay: upper bound on one wait.
        exceptions: the exception types that are worth another try; others propagate at once.
        jitter: fraction of random spread added to each wait, so that clients do not stampede.
        sleep: the sleeping function (tests pass a fake).
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorator(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            for k in range(attempts):
                try:
                    return fn(*args, **kwargs)
                except exceptions as e:
                    if k == attempts - 1:
                        raise
                    delay = min(max_delay, base_delay * 2**k)
                    delay *= 1 + jitter * random.random()
                    log.warning(
                        "%s failed (%s); retry %d/%d in %.2fs", fn.__name__, e, k + 1, attempts - 1, delay
                    )
                    sleep(delay)
            raise AssertionError("unreachable")

        return wrapper

    return decorator
