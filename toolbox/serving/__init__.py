"""Serving: inference engines behind one interface, the OpenAI-compatible server, the benchmark."""
