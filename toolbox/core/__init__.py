"""Core: registries, events, retry, run context, device and seed helpers."""
