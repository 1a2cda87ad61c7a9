"""Objectives (losses), grouped by family: supervised, preference, policy, graph."""
