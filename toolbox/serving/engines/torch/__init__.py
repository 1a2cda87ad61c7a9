"""The ``torch`` engine (ours) and its internals: the slot runner, continuous-batching scheduler,
chunked prefill, decode attention kernel, request handles, layer weights and the architectures it runs.

Code outside ``toolbox.serving`` uses this package's public names only, never its modules:
``TorchEngine`` (the engine), ``SlotRunner`` (its slot KV cache and forward, for a caller that needs
a cache of its own over the same weights, as the decision backend does) and ``RequestHandle``.
"""

from toolbox.serving.engines.torch.engine import TorchEngine
from toolbox.serving.engines.torch.handle import RequestHandle
from toolbox.serving.engines.torch.runner import SlotRunner

__all__ = ["RequestHandle", "SlotRunner", "TorchEngine"]
