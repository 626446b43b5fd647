"""The tiny paper's flow, derived from its loss by sympy (never typed by hand)."""

from __future__ import annotations

import sympy as sp

from theory import ReducedSystem

from .config import PAPER, SPEC, TinyConfig

__all__ = ["a", "p", "lr", "loss", "systems"]

a, p, lr = sp.symbols("a p lr", real=True)


def loss() -> sp.Expr:
    """Cross-entropy of the logit ``a`` against Bernoulli(``p``) labels (the population loss)."""
    s = 1 / (1 + sp.exp(-a))
    return -p * sp.log(s) - (1 - p) * sp.log(1 - s)


def systems(config: TinyConfig | None = None) -> list[ReducedSystem]:
    """``da/dt = -lr dL/da`` (what ``tdyn derive tiny`` prints)."""
    flow = sp.simplify(-lr * sp.diff(loss(), a))
    return [ReducedSystem(name="logit", paper=PAPER, state=(a,), parameters=(p, lr), rhs=(flow,),
                          observables={"prob": 1 / (1 + sp.exp(-a))}, spec=SPEC)]
