"""Ranges of numeric config fields, declared in a component's signature.

A component annotates a field with one of these instead of a bare ``int``/``float``::

    def __init__(self, parts, max_steps: AtLeastOne = 100, max_grad_norm: NonNegativeFloat = 1.0): ...

Inside a container or an optional too: ``hidden_dims: list[AtLeastOne]``, ``max_model_len:
AtLeastOne | None``.

The registry's signature check (``toolbox.core.config_types.check_type``, through pydantic) then
rejects ``trainer.grad_accum_steps=0`` before anything is built or written, naming the key and
the range; ``toolbox catalog`` shows the range beside the type (``int >= 1``).
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Gt, Le

#: a count that must be at least one (steps, batch sizes, threads, processes)
AtLeastOne = Annotated[int, Ge(1)]
#: a count or period where 0 means "none" or "off" (eval_every, save_every, warmup_steps)
NonNegativeInt = Annotated[int, Ge(0)]
#: a strictly positive real (learning rates, temperatures)
PositiveFloat = Annotated[float, Gt(0)]
#: a real that may be 0 (max_grad_norm: 0 disables clipping; weight decay)
NonNegativeFloat = Annotated[float, Ge(0)]
#: a fraction in [0, 1] (dropout, split fractions, probabilities)
Fraction = Annotated[float, Ge(0), Le(1)]
#: a share in (0, 1] that must not be empty (the GPU memory an engine may take)
PositiveFraction = Annotated[float, Gt(0), Le(1)]
