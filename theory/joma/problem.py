"""What ``tdyn derive joma`` prints and what ``tdyn simulate joma`` integrates.

* :func:`systems` — the derived systems of the config (block flow, Theorem 2, the nonlinear ODEs);
* :func:`problem` — the block ODE of the config's own data (the paper row's ``problem`` slot);
* :func:`block_flow_problem` — the block ODE for a data set of any size (hundreds of sequences),
  e.g. a trained network's bags of words and back-propagated gradients: a :class:`~theory.Problem`
  on :class:`BlockFlowSystem`, integrated by :func:`simulate.solve` like every other problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp

from ..core import ReducedSystem
from ..errors import ConfigError
from ..problem import Problem
from .config import FIG4_MU, PAPER, SPEC, JomaConfig
from .derive import block_system, nonlinear_exp_system, nonlinear_softmax_system, state_names, theorem2_system
from .population import block_flow, block_initial_state, block_parameters

__all__ = ["systems", "problem", "block_flow_problem", "block_flow_system", "BlockFlowSystem", "SOLVE_OPTIONS"]

#: the block flow is not stiff, and Kvaerno5 took ~30 s to compile for its 27 states: Dopri8/DOP853;
#: tolerances tight enough that the ODE's own error is far below any agreement being measured.
SOLVE_OPTIONS = {"diffrax": {"method": "Dopri8", "rtol": 1e-10, "atol": 1e-12},
                 "scipy": {"method": "DOP853", "rtol": 1e-10, "atol": 1e-12}}


def systems(config: JomaConfig | None = None) -> list[ReducedSystem]:
    """The block flow for the config, Theorem 2, the two nonlinear ODEs (docs/papers/joma.md §2.1-2.5)."""
    c = config or JomaConfig()
    return [block_system(c.attention, c.activation, c.Mc, c.K, c.N), theorem2_system(c.Mc, 1),
            nonlinear_exp_system(len(FIG4_MU)), nonlinear_softmax_system(len(FIG4_MU))]


def problem(config: JomaConfig) -> Problem:
    """The block ODE (spec §2.1) of the config's block (variants ``fixed`` and ``ce``, whose networks
    are that block; the ODE is the fixed-``G`` flow), solved at ``config.ode_times()``
    (``t = lr * step`` at the Trainer's log steps). The other variants' networks are compared with
    ODEs built from their own data in :mod:`figures.joma.compare`: a ``ConfigError`` here."""
    check_block_variant(config, "reduced ODE")
    c = config if config.variant == "fixed" else config.replace(variant="fixed")
    sysm = block_system(c.attention, c.activation, c.Mc, c.K, c.N)
    return Problem(sysm, block_parameters(c), block_initial_state(c), c.ode_times(), SOLVE_OPTIONS, config)


#: the variants whose network is the block of spec §1.1 (the ODE of :func:`problem`, the SDE of
#: :func:`.sde.minibatch_sde`)
BLOCK_VARIANTS = ("fixed", "ce")


def check_block_variant(config: JomaConfig, what: str) -> None:
    """``ConfigError("variant", ...)`` unless the config's variant is a block variant."""
    if config.variant not in BLOCK_VARIANTS:
        raise ConfigError("variant", f"the {what} of `tdyn simulate joma` is the block's (variants "
                                     f"{', '.join(BLOCK_VARIANTS)}); the {config.variant!r} network is compared "
                                     "with ODEs of its own data in figures.joma.compare")


@dataclass(frozen=True, eq=False)
class BlockFlowSystem(ReducedSystem):
    """The block flow (spec §2.1) of a data set of ``n_rows`` rows, for any ``n_rows``.

    Same state (``z_l``, ``v_k_l``, ``s_k``, :func:`.derive.state_names` order) and data
    parameters (``x_n_l``, ``g_n_k``, ``tau``) as :func:`.derive.block_system`, whose sympy
    right-hand side (a sum of ``n_rows`` derived per-sample flows, with ``A_n``, ``u_n_k``) takes
    minutes to build beyond a handful of rows. Here the right-hand side is evaluated by
    :func:`.population.block_flow` — the array formula the tests hold equal to the derived rhs —
    with numpy (scipy backend) or ``jax.numpy`` (diffrax backend); the symbolic ``rhs`` entries are
    named placeholders ``F_<state>(state)`` for the exporters. No symbolic Jacobian: explicit
    methods only (the problem's own options are Dopri8 / DOP853)."""

    attention: str = "exp"
    activation: str = "linear"
    n_contextual: int = 1
    n_hidden: int = 1
    n_rows: int = 1

    def _unpack(self, y, p):
        Mc, K, N = self.n_contextual, self.n_hidden, self.n_rows
        X = p[:N * Mc].reshape(N, Mc)
        G = p[N * Mc:N * (Mc + K)].reshape(N, K)
        return X, G, p[N * (Mc + K)], y[:Mc], y[Mc:Mc + K * Mc].reshape(K, Mc), y[Mc + K * Mc:]

    def _flow(self, y, p, xp):
        X, G, tau, z, V, s = self._unpack(y, p)
        Vd, sd, zd = block_flow(self.attention, self.activation, X, G, V, s, z, tau, xp=xp)
        return xp.concatenate([zd, Vd.ravel(), sd])

    def to_numpy(self):
        """``f(t, y, p) -> dy/dt`` (float64): :func:`.population.block_flow` with numpy."""
        return lambda t, y, p: self._flow(np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64), np)

    def to_jax(self):
        """``f(t, y, p) -> dy/dt`` traceable by jax: :func:`.population.block_flow` with jax.numpy."""
        import jax.numpy as jnp

        return lambda t, y, p: self._flow(y, p, jnp)

    def jacobian(self) -> sp.Matrix:
        raise ConfigError("method", f"{self.paper}/{self.name} has no symbolic Jacobian; use an explicit method "
                                    "(scipy DOP853/RK45/RK23, diffrax Dopri8/Dopri5/Tsit5)")


@lru_cache(maxsize=16)
def block_flow_system(attention: str, activation: str, Mc: int, K: int, N: int) -> BlockFlowSystem:
    """The :class:`BlockFlowSystem` of this shape (one object per shape, so the compiled diffrax
    solver is reused across data sets: the data travel in the parameter vector)."""
    if min(Mc, K, N) < 1:
        raise ConfigError("K" if K < 1 else ("Mc" if Mc < 1 else "N"), "must be >= 1")
    state = tuple(sp.Symbol(n, real=True) for n in state_names(Mc, K))
    params = (*(sp.Symbol(f"x_{n}_{l}", nonnegative=True) for n in range(1, N + 1) for l in range(1, Mc + 1)),
              *(sp.Symbol(f"g_{n}_{k}", real=True) for n in range(1, N + 1) for k in range(1, K + 1)),
              sp.Symbol("tau", positive=True))
    return BlockFlowSystem(
        name=f"block_{attention}_{activation}_data", paper=PAPER, state=state, parameters=params,
        rhs=tuple(sp.Function(f"F_{s}")(*state) for s in state),
        spec=f"{SPEC} §2.1 ({attention} attention, {activation} MLP, Mc={Mc}, K={K}, {N} data rows)",
        description=("The JoMA block flow (mean over the data rows of the derived per-sample flow) under a "
                     "stationary back-propagated gradient, evaluated by theory.joma.population.block_flow."),
        attention=attention, activation=activation, n_contextual=Mc, n_hidden=K, n_rows=N)


def block_flow_problem(config: JomaConfig, X: np.ndarray, G: np.ndarray, t: np.ndarray | None = None, *,
                       z0=None, V0=None, s0=None) -> Problem:
    """The block flow (spec §2.1) of rows ``X`` (N, Mc) with stationary gradients ``G`` (N, K) —
    any ``N`` — from ``z0`` (Mc,), ``V0`` (K, Mc), ``s0`` (K,) (default 0) at times ``t`` (default
    ``config.ode_times()``), with the config's attention, activation and temperature:
    ``simulate.solve(block_flow_problem(...), backend="scipy")`` (DOP853, :data:`SOLVE_OPTIONS`)."""
    c = config
    X, G = np.asarray(X, dtype=np.float64), np.asarray(G, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != c.Mc:
        raise ConfigError("X", f"expected rows of Mc={c.Mc} token frequencies, got shape {X.shape}")
    if G.shape != (X.shape[0], c.K):
        raise ConfigError("G", f"expected shape ({X.shape[0]}, {c.K}) (one gradient row per data row), got {G.shape}")
    sysm = block_flow_system(c.attention, c.activation, c.Mc, c.K, X.shape[0])
    z0 = np.zeros(c.Mc) if z0 is None else np.asarray(z0, dtype=np.float64)
    V0 = np.zeros((c.K, c.Mc)) if V0 is None else np.asarray(V0, dtype=np.float64)
    s0 = np.zeros(c.K) if s0 is None else np.asarray(s0, dtype=np.float64)
    y0 = np.concatenate([z0.ravel(), V0.ravel(), s0.ravel()])
    t = c.ode_times() if t is None else np.asarray(t, dtype=np.float64)
    return Problem(sysm, block_parameters(c, X, G), y0, t, SOLVE_OPTIONS, config)
