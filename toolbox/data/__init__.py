"""Data: tokenizers, sources (generated, local files, HF Hub), dataset factories, collators."""
