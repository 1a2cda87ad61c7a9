"""Shared expectations of the benchmark tests."""

#: the process-wide torch settings every harness benchmark gives both sides by default (the JSON's
#: ``settings``): one thread, deterministic kernels without the NaN fill, grad mode on, float32
FAIR_SETTINGS = {
    "threads": 1,
    "deterministic": True,
    "fill_uninitialized_memory": False,
    "grad_enabled": True,
    "dtype": "float32",
}
