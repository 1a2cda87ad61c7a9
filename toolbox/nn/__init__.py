"""Neural-network building blocks: layers registered by role, and models whose slots take layer specs.

- ``toolbox.nn.layers`` registers layers in ``LAYERS`` under ``<role>/<kind>`` names
  (``activation/gelu``, ``norm/rmsnorm``, ``mlp/dense``, ``feedforward/swiglu``, ``attention/mha``).
- ``toolbox.nn.models`` registers models in ``MODELS`` (``tiny_llama``, ``pretrained``,
  ``transformer_lm``, ``mlp_classifier``).
- :func:`build_layer` builds the layer a config spec names, injecting the dimensions its owner knows.

Both registries import their modules on first lookup, so importing this package stays cheap.
"""

from toolbox.nn.layer_spec import LayerSpec, build_layer, config_path

__all__ = ["LayerSpec", "build_layer", "config_path"]
