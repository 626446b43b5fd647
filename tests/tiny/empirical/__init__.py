"""The tiny paper in PyTorch: ``data`` (labels), ``model`` (one logit), ``update`` (the SGD rule,
optax style), ``experiment`` (the Experiment and ``run``, the row's train slot)."""

from .experiment import TinyExperiment, run

__all__ = ["TinyExperiment", "run"]
