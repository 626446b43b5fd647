"""The tiny paper's theory: its Config (time, variants, presets), the derived flow, the problem.

Modules: ``config`` (PAPER, SPEC, TinyConfig, estimate), ``derive`` (the loss and its gradient
flow), ``population`` (the flow in numpy, independently of sympy), ``problem`` (what
``simulate.solve`` integrates), ``sde`` (the generic SDE of the derived minibatch noise).
"""

from .config import PAPER, SPEC, TinyConfig, estimate
from .derive import systems
from .problem import problem
from .sde import sde

__all__ = ["PAPER", "SPEC", "TinyConfig", "estimate", "systems", "problem", "sde"]
