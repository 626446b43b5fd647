"""What ``tdyn derive joma`` prints and what ``tdyn simulate joma`` integrates."""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from ..core import ReducedSystem
from ..problem import Problem
from .config import FIG4_MU, JomaConfig
from .derive import block_system, nonlinear_exp_system, nonlinear_softmax_system, theorem2_system
from .population import block_flow, block_initial_state, block_parameters

__all__ = ["systems", "problem", "solve_block_flow", "SOLVE_OPTIONS"]

#: the block flow is not stiff, and Kvaerno5 took ~30 s to compile for its 27 states: Dopri8/DOP853;
#: tolerances tight enough that the ODE's own error is far below any agreement being measured.
SOLVE_OPTIONS = {"diffrax": {"method": "Dopri8", "rtol": 1e-10, "atol": 1e-12},
                 "scipy": {"method": "DOP853", "rtol": 1e-10, "atol": 1e-12}}


def systems(config: JomaConfig | None = None) -> list[ReducedSystem]:
    """The block flow for the config, Theorem 2, the two nonlinear ODEs (spec §2.1-2.5)."""
    c = config or JomaConfig()
    return [block_system(c.kind, c.activation, c.Mc, c.K, c.N), theorem2_system(c.Mc, 1),
            nonlinear_exp_system(len(FIG4_MU)), nonlinear_softmax_system(len(FIG4_MU))]


def problem(config: JomaConfig) -> Problem:
    """The block ODE (spec §2.1) for the config's ``fixed`` variant, solved at
    ``config.ode_times()`` (``t = lr * step`` at the Trainer's log steps)."""
    c = config if config.variant == "fixed" else config.for_variant("fixed")
    sysm = block_system(c.kind, c.activation, c.Mc, c.K, c.N)
    return Problem(sysm, block_parameters(c), block_initial_state(c), c.ode_times(), SOLVE_OPTIONS, config)


def solve_block_flow(config: JomaConfig, X: np.ndarray, G: np.ndarray, t: np.ndarray, z0=None, V0=None, s0=None):
    """The block flow (spec §2.1) for a data set of any size ``N`` (rows ``X`` (N, Mc), stationary
    gradients ``G`` (N, K)) at times ``t``, through :func:`.population.block_flow` (the formula
    the tests hold against :func:`.derive.block_system`; a sympy system with one parameter per
    sample would not scale to hundreds of sequences). scipy DOP853 with :data:`SOLVE_OPTIONS`.

    Returns ``{"time", "z" (n, Mc), "V" (n, K, Mc), "s" (n, K), "status"}``; on a blow-up the arrays
    stop at the last time reached (``status`` != 0)."""
    c = config
    Mc, K = c.Mc, c.K
    z0 = np.zeros(Mc) if z0 is None else np.asarray(z0, float)
    V0 = np.zeros((K, Mc)) if V0 is None else np.asarray(V0, float)
    s0 = np.zeros(K) if s0 is None else np.asarray(s0, float)

    def rhs(_, y):
        z, V, s = y[:Mc], y[Mc:Mc + K * Mc].reshape(K, Mc), y[Mc + K * Mc:]
        Vd, sd, zd = block_flow(c.kind, c.activation, X, G, V, s, z, c.temperature)
        return np.concatenate([zd, Vd.ravel(), sd])

    opts = SOLVE_OPTIONS["scipy"]
    t = np.asarray(t, float)
    sol = solve_ivp(rhs, (t[0], t[-1]), np.concatenate([z0, V0.ravel(), s0]), t_eval=t, method=opts["method"],
                    rtol=opts["rtol"], atol=opts["atol"])
    Y = sol.y.T
    return {"time": sol.t, "z": Y[:, :Mc], "V": Y[:, Mc:Mc + K * Mc].reshape(-1, K, Mc), "s": Y[:, Mc + K * Mc:],
            "status": int(sol.status)}
