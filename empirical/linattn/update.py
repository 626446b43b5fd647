"""The update rule, optax style: pure ``init``/``update`` functions over an array module ``xp`` (numpy or
torch). Gradient descent: full-batch (``mode = "gd"``) or on fresh minibatches (``mode = "sgd"``)."""

from __future__ import annotations

import numpy as np

__all__ = ["init", "update"]


def init(params, *, xp=np) -> dict:
    """Gradient descent keeps no state."""
    return {}


def update(grads, state: dict, params, *, lr: float, xp=np):
    """``(params - lr * grads, state)``."""
    return params - lr * xp.asarray(grads), state
