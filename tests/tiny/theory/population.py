"""The tiny paper's population gradient in numpy, written from the paper, not from sympy: the
derivation is checked against it."""

from __future__ import annotations

import numpy as np

__all__ = ["sigmoid", "population_gradient"]


def sigmoid(a, xp=np):
    return 1 / (1 + xp.exp(-a))


def population_gradient(a, p, xp=np):
    """``dL/da = sigma(a) - p`` of the expected cross-entropy."""
    return sigmoid(a, xp) - p
