"""The tiny paper's flow and minibatch noise, derived from its per-sample loss by sympy (never typed
by hand): the population loss is the per-sample cross-entropy averaged over ``y ~ Bernoulli(p)``;
the noise (theory/noise.py: a finite distribution, so ``Cov[g] = lr^2 p (1-p)`` exactly) comes from
the same per-sample loss (docs/sde.md)."""

from __future__ import annotations

import sympy as sp

from theory import ReducedSystem
from theory.noise import Finite, derive_noise, expectation

from .config import PAPER, SPEC, TinyConfig

__all__ = ["a", "p", "lr", "y", "LABELS", "per_sample_loss", "loss", "systems"]

a, p, lr = sp.symbols("a p lr", real=True)
y = sp.Symbol("y", real=True)  # the label: the per-sample loss's sample symbol

#: the data distribution: the label is Bernoulli(p)
LABELS = Finite.bernoulli(y, p)


def per_sample_loss() -> sp.Expr:
    """Cross-entropy of one label ``y`` at logit ``a``."""
    s = 1 / (1 + sp.exp(-a))
    return -y * sp.log(s) - (1 - y) * sp.log(1 - s)


def loss() -> sp.Expr:
    """The population loss: the per-sample loss averaged over the labels."""
    return expectation(per_sample_loss(), LABELS)


def systems(config: TinyConfig | None = None) -> list[ReducedSystem]:
    """``da/dt = -lr dL/da`` with its minibatch noise (what ``tdyn derive tiny`` prints)."""
    flow = sp.simplify(-lr * sp.diff(loss(), a))
    noise = derive_noise(per_sample_loss(), (a,), (y,), LABELS, preconditioner=lr,
                         description="labels y ~ Bernoulli(p); time = optimiser steps")
    return [ReducedSystem(name="logit", paper=PAPER, state=(a,), parameters=(p, lr), rhs=(flow,),
                          observables={"prob": 1 / (1 + sp.exp(-a))}, spec=SPEC, noise=noise)]
