"""The tiny paper's claims, each decided by measurement.

``claims`` (the row's ``claims`` slot) decides the registry ``claims.toml`` beside this module (the
worked example of docs/claims.md) over seeds, with its validity map; the functions it names (the
statistic, the regime's derived quantities, the theory's trajectory) are below, the batched runs
are :func:`tiny.empirical.experiment.train_seeds`. :func:`converges_to_p` is the compare report's
single-run claim.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from figures.claims import registry_claims
from figures.report import Claim

from ..theory import TinyConfig, problem

__all__ = ["STATEMENTS", "converges_to_p", "claims", "log_gap_ratio", "claim_quantities", "theory"]

#: the row's claims slot: the registry beside this module, decided over seeds with its map
claims = registry_claims("tiny", Path(__file__).with_name("claims.toml"))

STATEMENTS = {"converges_to_p": "sigma(a) converges to the label frequency p"}


def converges_to_p(final_prob: float, p: float, ode_final_prob: float, regime: str) -> Claim:
    """Holds when the trained network ends as close to ``p`` as the theory's own trajectory does,
    up to the SGD noise of one minibatch average (0.02 at batch 256)."""
    gap = abs(final_prob - p)
    return Claim("converges_to_p", STATEMENTS["converges_to_p"], gap < abs(ode_final_prob - p) + 0.02,
                 {"final_prob": final_prob, "ode_final_prob": ode_final_prob, "p": p}, regime)


def log_gap_ratio(traj, config: TinyConfig, *, horizon: int) -> float:
    """``log(mean_{t in [T/2, T]} |sigma(a_t) - p| / |sigma(a_0) - p|)`` at horizon ``T`` (steps),
    on any trajectory with a ``prob`` variable: a training run or the ODE."""
    t, prob = traj["time"].values, traj["prob"].values
    T = config.ode_time(horizon)
    keep = (t >= T / 2) & (t <= T)
    return float(np.log(np.mean(np.abs(prob[keep] - config.p)) / abs(prob[0] - config.p)))


def claim_quantities(config: TinyConfig, coords) -> dict:
    """Derived quantities of the regime: the step's curvature ``lr p (1 - p)`` at the fixed point."""
    return {"lr_curvature": config.lr * config.p * (1 - config.p)}


def theory(config: TinyConfig):
    import simulate

    return simulate.solve(problem(config), backend="scipy")
