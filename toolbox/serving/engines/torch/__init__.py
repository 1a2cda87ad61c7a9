"""The ``torch`` engine (ours) and its internals: the slot runner, continuous-batching scheduler,
chunked prefill, decode attention kernel, request handles, layer weights and the architectures it runs."""
