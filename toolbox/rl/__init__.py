"""Reinforcement learning parts: advantage estimators (``ADVANTAGES``), text rollouts, buffers."""
