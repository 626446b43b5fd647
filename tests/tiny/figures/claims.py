"""The tiny paper's claims, each decided by measurement."""

from __future__ import annotations

from figures.report import Claim

__all__ = ["STATEMENTS", "converges_to_p"]

STATEMENTS = {"converges_to_p": "sigma(a) converges to the label frequency p"}


def converges_to_p(final_prob: float, p: float, ode_final_prob: float, regime: str) -> Claim:
    """Holds when the trained network ends as close to ``p`` as the theory's own trajectory does,
    up to the SGD noise of one minibatch average (0.02 at batch 256)."""
    gap = abs(final_prob - p)
    return Claim("converges_to_p", STATEMENTS["converges_to_p"], gap < abs(ode_final_prob - p) + 0.02,
                 {"final_prob": final_prob, "ode_final_prob": ode_final_prob, "p": p}, regime)
