"""Coordinates on low-dimensional invariant subspaces, with bilinear forms given by Gram tables.

Reduced dynamics of linear-algebraic models are derived by writing a parameter (a matrix ``V`` or
a vector ``a``) as a combination of a few fixed basis elements (``V = zeta*P_tilde + omega*mu1^T``,
``a = xi*1 + beta*q``) and evaluating every bilinear quantity the loss needs (traces, inner
products, the preconditioner's metric) through a Gram table of the basis. Each table entry is a
lemma about the basis (e.g. ``tr(P_tilde Sigma P_tilde^T) = K``); the paper module states them and
the tests check them on random instances. With the tables, the loss and the metric become sympy
expressions of the coordinates, and the reduced flow is ``-eta * M^{-1} grad L``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

__all__ = ["Coords", "BilinearForm", "natural_gradient_flow"]


@dataclass(frozen=True)
class Coords:
    """An element of a space written in a fixed basis: ``sum_i coeffs[i] * basis[i]``."""

    coeffs: tuple[sp.Expr, ...]

    @staticmethod
    def of(*coeffs) -> "Coords":
        return Coords(tuple(sp.sympify(c) for c in coeffs))

    def __add__(self, other: "Coords") -> "Coords":
        return Coords(tuple(a + b for a, b in zip(self.coeffs, other.coeffs, strict=True)))

    def scale(self, c) -> "Coords":
        return Coords(tuple(c * a for a in self.coeffs))


@dataclass(frozen=True)
class BilinearForm:
    """``B(x, y) = x^T G y`` in basis coordinates; ``G`` is the Gram table of the basis."""

    gram: sp.Matrix
    meaning: str = ""

    def __call__(self, x: Coords, y: Coords) -> sp.Expr:
        return (sp.Matrix([x.coeffs]) * self.gram * sp.Matrix(y.coeffs))[0, 0]

    def metric(self, weight=1) -> sp.Matrix:
        """The metric tensor on the coordinates induced by this form (times ``weight``)."""
        return weight * self.gram


def natural_gradient_flow(loss: sp.Expr, blocks: Sequence[tuple[Sequence[sp.Symbol], sp.Matrix, sp.Expr]]):
    """Preconditioned gradient flow on block coordinates.

    ``blocks`` is a list of ``(coordinates, metric, rate)``; each block evolves as
    ``d(coords)/dt = -rate * metric^{-1} * dL/d(coords)``. When the coordinates parametrise an
    invariant manifold of the full preconditioned flow, and ``metric`` is the full preconditioner's
    metric pulled back to the coordinates, this *is* the full flow restricted to the manifold.
    Returns the right-hand sides in block order.
    """
    out: list[sp.Expr] = []
    for coords, metric, rate in blocks:
        grad = sp.Matrix([sp.diff(loss, c) for c in coords])
        vel = -rate * metric.inv() * grad
        out.extend(sp.expand(v) for v in vel)
    return out
