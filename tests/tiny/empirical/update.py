"""The update rule, optax style: pure ``init``/``update`` functions over an array module ``xp``
(numpy or torch), so every engine of the paper applies the same rule."""

from __future__ import annotations

import numpy as np

__all__ = ["init", "update"]


def init(params, *, xp=np) -> dict:
    """Plain SGD keeps no state."""
    return {}


def update(grads, state: dict, params, *, lr: float, xp=np):
    """``(params - lr * grads, state)``."""
    return params - lr * xp.asarray(grads), state
