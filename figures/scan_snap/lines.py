"""Scan & Snap's theory lines: the full T = inf ODE and the reduced Lemma-4 system, solved (scipy,
float64) for a config — what the compare report, the claims, the figures and the ladder overlay.
"""

from __future__ import annotations

import numpy as np

import simulate as sim
from theory import scan_snap as ss

__all__ = ["theory_trajectory", "reduced_trajectory"]


def theory_trajectory(config: ss.ScanSnapConfig, t: np.ndarray | None = None):
    """The full T = inf ODE of ``ss.problem(config)`` with its scipy solve options (DOP853: not stiff
    here, and no jit compile), at ``config.ode_times()`` or ``t``."""
    return sim.solve(ss.problem(config), t=t, backend="scipy")


def reduced_trajectory(config: ss.ScanSnapConfig, t: np.ndarray, *, remark1: bool = False):
    """The reduced Lemma-4 system (:func:`theory.scan_snap.reduced_system`, ``remark1``: h at Remark
    1's effective rate) from zero init."""
    sysm = ss.reduced_system(config, remark1=remark1)
    return sim.solve(sysm, ss.reduced_parameters(config), np.zeros(len(sysm.state)), t, backend="scipy",
                     **ss.SOLVE_OPTIONS["scipy"])
