"""linattn in PyTorch (docs/papers/linattn.md §2, §5): ``data`` (in-context regression sequences), ``model`` (multi-head
linear attention, merged or separate key-query, seeds on a leading axis; the two-layer cubic-feature network),
``update`` (gradient descent, optax style), ``experiment`` (the Experiment, ``run`` and the seed-batched
``train_seeds``)."""

from .experiment import LinAttnExperiment, run, train_seeds

__all__ = ["LinAttnExperiment", "run", "train_seeds"]
