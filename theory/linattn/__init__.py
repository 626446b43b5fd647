"""linattn — in-context learning in linear attention (Zhang, Singh, Latham & Saxe, ICML 2025; docs/papers/linattn.md).

Modules: ``config`` (PAPER, SPEC, LinAttnConfig, estimate), ``derive`` (the population loss from the data model
and the gradient flows, merged and separate, their scalar reductions and the closed form), ``population`` (the
loss and its gradient in numpy, written independently of sympy), ``problem`` (what ``simulate.solve``
integrates).
"""

from .config import PAPER, SPEC, LinAttnConfig, estimate
from .derive import systems
from .problem import problem

__all__ = ["PAPER", "SPEC", "LinAttnConfig", "estimate", "systems", "problem"]
