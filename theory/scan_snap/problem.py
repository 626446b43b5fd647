"""The paper-table hooks: what ``tdyn derive`` prints and what ``tdyn simulate`` integrates."""

from __future__ import annotations

import numpy as np

from ..core import ReducedSystem
from ..errors import ConfigError
from ..problem import Problem
from .config import ScanSnapConfig
from .derive import full_parameters, full_system
from .reduced import reduced_system, snap_system

__all__ = ["systems", "problem", "SOLVE_OPTIONS"]

#: The T = inf flow is not stiff for learning rates in the theory's range: explicit Runge-Kutta
#: avoids the implicit solvers' Jacobians (Kvaerno5 on this system is ~15x slower than Tsit5).
SOLVE_OPTIONS = {"diffrax": {"method": "Tsit5"}, "scipy": {"method": "DOP853", "rtol": 1e-9, "atol": 1e-11}}


def systems(config: ScanSnapConfig | None = None) -> list[ReducedSystem]:
    """What ``tdyn derive scan-snap`` prints: the snap ODE (Theorem 4), the reduced z-ODE (Lemma 4 /
    Eqn. 10) and the full T = inf flow of the config's layout with the minibatch noise of finite-T
    count-vector SGD (:func:`full_system` with ``noise=True``), all with symbolic parameters."""
    config = config or ScanSnapConfig()
    return [snap_system(), reduced_system(config), full_system(config, noise=True)]


def problem(config: ScanSnapConfig) -> Problem:
    """``tdyn simulate scan-snap``: the full T = inf flow from zero init, solved at
    ``config.ode_times()`` (per-sample time, see :class:`ScanSnapConfig`)."""
    if not config.zero_init:
        raise ConfigError("zero_init", "the T = inf system is reduced exactly only from Y(0) = Z(0) = 0")
    system = full_system(config)
    return Problem(system, full_parameters(config), np.zeros(len(system.state)), config.ode_times(), SOLVE_OPTIONS, config)
