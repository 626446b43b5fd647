"""The tiny paper's theory: its Config (time, variants, presets), the derived flow, the problem.

Modules: ``config`` (PAPER, SPEC, TinyConfig, estimate), ``derive`` (the loss and its gradient
flow), ``population`` (the flow in numpy, independently of sympy), ``problem`` (what
``simulate.solve`` integrates). No ``sde``: the row says why.
"""

from .config import PAPER, SPEC, TinyConfig, estimate
from .derive import systems
from .problem import problem

__all__ = ["PAPER", "SPEC", "TinyConfig", "estimate", "systems", "problem"]
