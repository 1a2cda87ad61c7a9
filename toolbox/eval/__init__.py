"""Evaluation: perplexity, greedy exact match, and the `toolbox eval` stage."""
