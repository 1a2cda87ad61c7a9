"""Layers registered in ``LAYERS`` by role, each role in a module of its own.

Importing this package registers every built-in layer; the ``LAYERS`` registry does so on its first
lookup. Names read ``<role>/<kind>``:

- ``activation/relu``, ``activation/gelu``, ``activation/silu``, ``activation/tanh``, ``activation/elu``
- ``norm/layernorm``, ``norm/rmsnorm``, ``norm/batchnorm`` (injected: ``dim``)
- ``mlp/dense`` (injected: ``in_dim``, ``out_dim``)
- ``feedforward/gelu``, ``feedforward/swiglu`` (injected: ``dim``)
- ``attention/mha`` (injected: ``dim``, ``num_heads``)
- ``graph_conv/gcn``, ``graph_conv/sage``, ``graph_conv/gat``, ``graph_conv/gin`` (PyG; injected: ``in_dim``,
  ``out_dim``)
- ``policy_head/categorical`` (injected: ``num_actions``), ``policy_head/diag_gaussian``
  (injected: ``action_dim``, ``action_low``, ``action_high``)
"""

from toolbox.nn.layers import activation, attention, feedforward, graph_conv, mlp, norm, policy_head

__all__ = ["activation", "attention", "feedforward", "graph_conv", "mlp", "norm", "policy_head"]
