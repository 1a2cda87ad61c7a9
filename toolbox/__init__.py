"""toolbox: train, evaluate and serve models reproducibly, from one config."""

__version__ = "0.1.0"
