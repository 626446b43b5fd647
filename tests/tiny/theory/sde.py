"""The tiny paper's minibatch SDE: the generic SDE of its derived noise (the row's ``sde`` slot)."""

from __future__ import annotations

from .config import TinyConfig
from .problem import problem

__all__ = ["sde"]


def sde(config: TinyConfig):
    """``(model, config.ode_times())`` for ``simulate.solve_sde``."""
    from theory.noise_sde import noise_sde

    return noise_sde(problem(config))
