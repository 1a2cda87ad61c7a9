"""Decision backends: ``torch`` (our engine's KV cache, shared prefixes), ``hf``, ``http``, ``anyjev``."""

from __future__ import annotations

from typing import Any

from toolbox.decision.backends.base import DecisionBackend, Encoded, Group


def backend_for(engine: Any, **kwargs: Any) -> DecisionBackend:
    """The decision backend over an inference engine (``torch``, ``hf``, ``http``) or an AnyJev backend."""
    from toolbox.serving.engines.hf_engine import HFEngine
    from toolbox.serving.engines.http_engine import HTTPEngine
    from toolbox.serving.engines.torch import TorchEngine

    if isinstance(engine, DecisionBackend):
        return engine
    if isinstance(engine, TorchEngine):
        from toolbox.decision.backends.torch import TorchDecisionBackend

        return TorchDecisionBackend.from_engine(engine, **kwargs)
    if isinstance(engine, HFEngine):
        from toolbox.decision.backends.hf import HFDecisionBackend

        return HFDecisionBackend.from_engine(engine, **kwargs)
    if isinstance(engine, HTTPEngine):
        from toolbox.decision.backends.http import HTTPDecisionBackend

        return HTTPDecisionBackend(engine, **kwargs)
    if hasattr(engine, "next_token_logprobs"):
        from toolbox.decision.backends.anyjev import AnyJevBackend

        return AnyJevBackend(engine)
    raise TypeError(
        f"no decision backend for {type(engine).__name__}: use a torch, hf or http engine "
        "(toolbox.serving), or an AnyJev backend"
    )


__all__ = ["DecisionBackend", "Encoded", "Group", "backend_for"]
