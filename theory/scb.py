"""SCB — sparse contextual bigrams learned by a linear transformer (Ren, Wang, Lee, NeurIPS 2024).

Spec: ``papers/scb.md``. Conventions (spec §1.2, Decision 1–5): column-stochastic ``P`` with
stationary ``mu``; query ``k = x_{T+1}`` outside the context; ``q^(k)`` uniform on ``Q`` random
positions per query (``rho = 1/Q``); model ``yhat = V X a^(k)``; squared loss; preconditioners
``V D^{-1}`` and ``a_k / mu_k``; mu_k-weighted l1 penalty (uniform threshold ``eta_A * lam``).

What this module derives (nothing here is typed from the paper's printed equations):

1. the exact population loss from the moment identity ``E[X a b^T X^T] = <a,b> Sigma +
   (1^T a)(1^T b) mu mu^T`` (spec §3.1), evaluated on the invariant manifold
   ``V = zeta*P_tilde + omega*mu 1^T``, ``a_k = xi_k 1 + eta_k q_k`` through Gram tables;
2. the preconditioned gradient flow by differentiation, with the preconditioner's metric pulled
   back to the coordinates (spec §3.3): the symmetric 4-D system and the general 2+2N system;
3. the l1/proximal variant as a discrete map in the ``(u, w)`` coordinates (spec §3.3);
4. the stage-1 linearisation by a sympy Jacobian, its closed-form solution and the escape time
   (spec §3.4).

Also here (numpy/jax, used by simulate and empirical): the task instance (``P``, ``mu``, ``q``),
the exact population gradient of the full ``(V, A)``, the observables of §4 from full parameters,
and the minibatch-SGD SDE on the full parameters (spec §3.6 option A).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from .algebra import BilinearForm, Coords, natural_gradient_flow
from .core import ParamsBase, ReducedSystem
from .errors import ConfigError, check_choice

PAPER = "scb"
SPEC = "papers/scb.md"

__all__ = [
    "PAPER",
    "SCBConfig",
    "SCBTask",
    "make_task",
    "symmetric_system",
    "general_system",
    "l1_symmetric_system",
    "l1_general_system",
    "proximal_map",
    "stage1_linearisation",
    "escape_time_formula",
    "systems",
    "system_parameters",
    "initial_state",
    "population_loss",
    "population_gradient",
    "preconditioned_flow",
    "observables_from_parameters",
    "MinibatchSDE",
    "CORRELATION_OBSERVABLES",
    "ESCAPE_LEVEL",
]

# Symbols ----------------------------------------------------------------------------------------
zeta, omega, xi, eta = sp.symbols("zeta omega xi eta", real=True)
u, w = sp.symbols("u w", real=True)
T, Q, rho, K, m2 = sp.symbols("T Q rho K m2", positive=True)
eta_V, eta_A = sp.symbols("eta_V eta_A", positive=True)
lam = sp.Symbol("lambda", nonnegative=True)
t_sym = sp.Symbol("t", real=True)

#: Observables that measure learned correlation (acceptance: rel_l2 <= 0.05 against the ODE).
CORRELATION_OBSERVABLES = ("value_transition_correlation", "attention_target_overlap")
#: Escape = first time the attention coefficient eta reaches this level (spec §3.4 test values).
ESCAPE_LEVEL = 0.5


# ------------------------------------------------------------------------------------------------
# 1. Gram tables: the lemmas behind the reduction (each checked numerically in tests/test_scb_theory)
# ------------------------------------------------------------------------------------------------
# Matrix basis (P_tilde, mu 1^T); P = P_tilde + mu 1^T has coordinates (1, 1).  papers/scb.md §3.3
#   tr(X Sigma Y^T):  Sigma 1 = 0 kills mu1^T;  P_tilde Sigma = P Sigma  -> tr(P Sigma P^T) = K
SIGMA_FORM = BilinearForm(sp.Matrix([[K, 0], [0, 0]]), "tr(X Sigma Y^T)")
#   (X mu)^T (Y mu):  P_tilde mu = 0,  mu 1^T mu = mu  -> m2 = |mu|^2
MEAN_FORM = BilinearForm(sp.Matrix([[0, 0], [0, m2]]), "(X mu)^T (Y mu)")
#   tr(X D Y^T), D = diag(mu): the metric of the preconditioner V <- V - eta grad D^{-1}
#   tr(P_tilde D P_tilde^T) = sum_j mu_j |P e_j - mu|^2 = K ; tr(P_tilde D 1 mu^T) = P_tilde mu = 0
V_METRIC = BilinearForm(sp.Matrix([[K, 0], [0, m2]]), "tr(X D Y^T)")
P_COORDS = Coords.of(1, 1)


def _attention_basis(T_, rho_):
    """Vector basis (1_T, q) of R^T: <1,1> = T, <1,q> = 1^T q = 1, <q,q> = rho."""
    gram = BilinearForm(sp.Matrix([[T_, 1], [1, rho_]]), "<x, y> on span(1, q)")
    return gram, Coords.of(1, 0), Coords.of(0, 1)  # form, coords of 1, coords of q


def moment_form(V: Coords, W: Coords, a: Coords, b: Coords, inner, ones: Coords) -> sp.Expr:
    """``tr(V E[X a b^T X^T] W^T)`` by the moment identity (spec §3.1):
    ``E[X a b^T X^T] = <a,b> Sigma + (1^T a)(1^T b) mu mu^T``."""
    return inner(a, b) * SIGMA_FORM(V, W) + inner(a, ones) * inner(b, ones) * MEAN_FORM(V, W)


def query_loss(V: Coords, a: Coords, inner, ones: Coords, q: Coords) -> sp.Expr:
    """Population loss of one query, ``E ||y - V X a||^2 / 2`` with ``E[y|X,k] = P X q``:
    ``1/2 E|y|^2 - E[y^T V X a] + 1/2 E|V X a|^2``, ``|y| = 1`` (one-hot target)."""
    cross = moment_form(V, P_COORDS, a, q, inner, ones)  # E[(P X q)^T V X a]
    quad = moment_form(V, V, a, a, inner, ones)  # E|V X a|^2
    return sp.Rational(1, 2) - cross + sp.Rational(1, 2) * quad


# ------------------------------------------------------------------------------------------------
# 2. Reduced systems, derived
# ------------------------------------------------------------------------------------------------
def _sym_observables(xi_, eta_, zeta_, omega_, T_, rho_, loss):
    s = T_ * xi_ + eta_
    n = T_ * xi_**2 + 2 * xi_ * eta_ + rho_ * eta_**2
    c = xi_ + rho_ * eta_
    # |a/s - q|^2 = (xi 1 + (eta - s) q)^T (...) / s^2 in the Gram table of (1, q)
    dist2 = (T_ * xi_**2 + 2 * xi_ * (eta_ - s) + rho_ * (eta_ - s) ** 2) / s**2
    return {
        "value_transition_correlation": zeta_,  # <V - V mu 1^T, P_tilde>/|P_tilde|^2   (§4)
        "value_mean_scale": omega_,  # mu^T V mu / m2
        "attention_offsupport_level": xi_,  # mean off-support entry of a_k
        "attention_target_coefficient": eta_,  # (mean on-support - mean off-support)/rho
        "attention_target_overlap": c,  # <a_k, q_k>
        "attention_sum": s,  # 1^T a_k
        "attention_sq_norm": n,  # |a_k|^2
        "attention_mass_on_support": xi_ / rho_ + eta_,  # sum over S_k (uniform q: |S_k| = 1/rho)
        "population_loss": loss,
        "value_relative_distance_to_truth": sp.Abs(zeta_ / omega_ - 1),  # |V/colsum - P|_F/|P_tilde|_F
        "attention_distance_to_truth": sp.sqrt(dist2),  # rms_k |a_k/1^T a_k - q_k|
    }


@lru_cache(maxsize=None)
def symmetric_system() -> ReducedSystem:
    """The 4-D system (zeta, omega, xi, eta) for symmetric attention targets (all rho_k = rho).

    Every query shares (xi, eta), so the loss is sum_k mu_k L_k = L_k and the attention metric
    (the a_k/mu_k preconditioner's mu_k <da, da>, summed over k) is the Gram table of (1, q).
    (spec §3.3)
    """
    loss, raw_rhs = _symmetric_loss_and_flow()
    rhs = [sp.factor_terms(sp.simplify(r)) for r in raw_rhs]
    obs = _sym_observables(xi, eta, zeta, omega, T, rho, loss)
    lin = stage1_linearisation()
    return ReducedSystem(
        name="symmetric",
        paper=PAPER,
        state=(zeta, omega, xi, eta),
        parameters=(T, rho, K, m2, eta_V, eta_A),
        rhs=tuple(rhs),
        observables=obs,
        invariants={},
        closed_forms={
            "escape_time": escape_time_formula(),
            "stage1_x": lin["x"],
            "stage1_y": lin["y"],
            "minimal_loss": sp.Rational(1, 2) * (1 - m2 - K * rho),
        },
        spec=f"{SPEC} §3.3 (symmetric case)",
        description=(
            "Preconditioned population gradient flow of the linear transformer on SCB data, "
            "restricted to its exact invariant manifold V = zeta*P_tilde + omega*mu1^T, "
            "a_k = xi*1 + eta*q_k. Time is in optimiser steps (eta_V, eta_A are learning rates)."
        ),
    )


@lru_cache(maxsize=None)
def _symmetric_loss_and_flow() -> tuple[sp.Expr, tuple[sp.Expr, ...]]:
    """Population loss on the symmetric manifold and its preconditioned flow (spec §3.3)."""
    inner, ones, qc = _attention_basis(T, rho)
    V = Coords.of(zeta, omega)
    a = ones.scale(xi) + qc.scale(eta)
    loss = sp.expand(query_loss(V, a, inner, ones, qc))
    rhs = natural_gradient_flow(
        loss, [((zeta, omega), V_METRIC.metric(), eta_V), ((xi, eta), inner.metric(), eta_A)])
    return loss, tuple(rhs)


def loss_symmetric() -> sp.Expr:
    """The exact population loss on the symmetric manifold, constants included (spec §3.1)."""
    return _symmetric_loss_and_flow()[0]


def _indexed(name: str, n: int, **assumptions) -> tuple[sp.Symbol, ...]:
    return tuple(sp.Symbol(f"{name}_{i}", **assumptions) for i in range(1, n + 1))


@lru_cache(maxsize=None)
def general_system(N: int) -> ReducedSystem:
    """The (2 + 2N)-D system for arbitrary q^(k) (rho_k per query) and mu: state
    (zeta, omega, xi_1..xi_N, eta_1..eta_N).   (spec §3.3 "General reduced ODE")"""
    if N < 1:
        raise ConfigError("N", "must be >= 1")
    xis = _indexed("xi", N, real=True)
    etas = _indexed("eta", N, real=True)
    mus = _indexed("mu", N, positive=True)
    rhos = _indexed("rho", N, positive=True)
    V = Coords.of(zeta, omega)
    loss = 0
    blocks: list = [((zeta, omega), V_METRIC.metric(), eta_V)]
    for k in range(N):
        inner, ones, qc = _attention_basis(T, rhos[k])
        a = ones.scale(xis[k]) + qc.scale(etas[k])
        loss += mus[k] * query_loss(V, a, inner, ones, qc)
    loss = sp.expand(loss)
    for k in range(N):
        inner, _, _ = _attention_basis(T, rhos[k])
        blocks.append(((xis[k], etas[k]), inner.metric(mus[k]), eta_A))  # metric mu_k <da, da>
    rhs = natural_gradient_flow(loss, blocks)
    rhs = [sp.factor_terms(sp.simplify(r)) for r in rhs]
    # reorder: zeta, omega, xi_1, eta_1, ... -> zeta, omega, xi_1..xi_N, eta_1..eta_N
    z_rhs, o_rhs = rhs[0], rhs[1]
    xi_rhs = [rhs[2 + 2 * k] for k in range(N)]
    eta_rhs = [rhs[3 + 2 * k] for k in range(N)]
    obs = {
        "value_transition_correlation": zeta,
        "value_mean_scale": omega,
        "attention_target_overlap": sum(xis[k] + rhos[k] * etas[k] for k in range(N)) / N,
        "attention_sum": sum(T * xis[k] + etas[k] for k in range(N)) / N,
        "population_loss": loss,
    }
    return ReducedSystem(
        name="general",
        paper=PAPER,
        state=(zeta, omega, *xis, *etas),
        parameters=(T, K, m2, eta_V, eta_A, *mus, *rhos),
        rhs=(z_rhs, o_rhs, *xi_rhs, *eta_rhs),
        observables=obs,
        spec=f"{SPEC} §3.3 (general reduced ODE, N={N})",
        description="Per-query reduced flow; exact for any q^(k), mu and P (lambda = 0).",
    )


def _l1_attention_basis(T_, Q_, qbar):
    """Basis (1_off, e_1..e_Q) of R^T (off-support indicator, support unit vectors)."""
    nq = len(qbar)
    gram = sp.diag(T_ - Q_, *([1] * nq))
    form = BilinearForm(gram, "<x, y> on span(1_off, e_S)")
    ones = Coords.of(1, *([1] * nq))
    qc = Coords.of(0, *qbar)
    return form, ones, qc


@lru_cache(maxsize=None)
def l1_symmetric_system() -> ReducedSystem:
    """Continuous part of the l1/proximal flow for uniform q: a_k = u on the T - Q off-support
    positions and w on the Q support positions (spec §3.3 "With l1 (prox / u-w form)")."""
    gram = sp.diag(T - Q, Q)
    inner = BilinearForm(gram, "<x, y> on span(1_off, 1_S)")
    ones, qc = Coords.of(1, 1), Coords.of(0, 1 / Q)
    V = Coords.of(zeta, omega)
    a = Coords.of(u, w)
    loss = sp.expand(query_loss(V, a, inner, ones, qc))
    rhs = natural_gradient_flow(
        loss, [((zeta, omega), V_METRIC.metric(), eta_V), ((u, w), inner.metric(), eta_A)]
    )
    rhs = [sp.factor_terms(sp.simplify(r)) for r in rhs]
    s = (T - Q) * u + Q * w
    return ReducedSystem(
        name="l1_symmetric",
        paper=PAPER,
        state=(zeta, omega, u, w),
        parameters=(T, Q, K, m2, eta_V, eta_A),
        rhs=tuple(rhs),
        observables={
            "value_transition_correlation": zeta,
            "value_mean_scale": omega,
            "attention_target_overlap": w,
            "attention_sum": s,
            "attention_mass_on_support": Q * w,
            "attention_offsupport_level": u,
            "population_loss": loss,
        },
        spec=f"{SPEC} §3.3 (l1, u-w form, uniform q)",
        description="Gradient part of the proximal map; the prox soft-thresholds u and w at eta_A*lambda.",
    )


@lru_cache(maxsize=None)
def l1_general_system(N: int, Qn: int) -> ReducedSystem:
    """l1 u-w form for arbitrary support weights: state zeta, omega, u_k, w_{k,j} (2 + N(Q+1))."""
    us = _indexed("u", N, real=True)
    ws = [tuple(sp.Symbol(f"w_{k}_{j}", real=True) for j in range(1, Qn + 1)) for k in range(1, N + 1)]
    qb = [tuple(sp.Symbol(f"qbar_{k}_{j}", positive=True) for j in range(1, Qn + 1)) for k in range(1, N + 1)]
    mus = _indexed("mu", N, positive=True)
    V = Coords.of(zeta, omega)
    loss = 0
    blocks: list = [((zeta, omega), V_METRIC.metric(), eta_V)]
    for k in range(N):
        form, ones, qc = _l1_attention_basis(T, Qn, qb[k])
        a = Coords.of(us[k], *ws[k])
        loss += mus[k] * query_loss(V, a, form, ones, qc)
        blocks.append(((us[k], *ws[k]), form.metric(mus[k]), eta_A))
    loss = sp.expand(loss)
    rhs = natural_gradient_flow(loss, blocks)
    state = (zeta, omega) + tuple(x for k in range(N) for x in (us[k], *ws[k]))
    return ReducedSystem(
        name=f"l1_general",
        paper=PAPER,
        state=state,
        parameters=(T, K, m2, eta_V, eta_A, *mus, *(x for k in range(N) for x in qb[k])),
        rhs=tuple(rhs),
        observables={"value_transition_correlation": zeta, "value_mean_scale": omega, "population_loss": loss},
        spec=f"{SPEC} §3.3 (l1, u-w form, general q; Q={Qn} support positions per query)",
        description="Gradient part of the proximal map; the prox soft-thresholds u_k and w_k at eta_A*lambda.",
    )


def soft_threshold(x, thr):
    return np.sign(x) * np.maximum(np.abs(x) - thr, 0.0)


def proximal_map(system: ReducedSystem):
    """The discrete preconditioned proximal step of an l1 system (spec §2, §3.3):
    ``y <- y + f(y)`` (Euler step of size 1: learning rates are inside ``f``), then soft-threshold
    every attention coordinate (u, w) at ``eta_A * lambda``. Returns ``step(y, p, lam) -> y``."""
    if not system.name.startswith("l1"):
        raise ConfigError("system", "proximal_map needs an l1 system (l1_symmetric or l1_general)")
    f = system.to_numpy()
    i_eta_A = system.parameter_names.index("eta_A")
    att = np.array([n not in ("zeta", "omega") for n in system.state_names])

    def step(y, p, lam_value):
        y_new = np.asarray(y, float) + f(0.0, y, p)
        y_new[att] = soft_threshold(y_new[att], p[i_eta_A] * lam_value)
        return y_new

    return step


# ------------------------------------------------------------------------------------------------
# 3. Stage 1 (spec §3.4)
# ------------------------------------------------------------------------------------------------
SADDLE = {zeta: 0, omega: 1, xi: 1 / T, eta: 0}


def escape_time_formula() -> sp.Expr:
    """``t* = log(T sqrt(rho)) / sqrt(eta_V eta_A rho K)``: the time for the rescaled linear system
    ``x' = y + b/T, y' = x`` started at 0 to reach O(1), ``b = sqrt(eta_V/rho)`` (spec §3.4)."""
    return sp.log(T * sp.sqrt(rho)) / sp.sqrt(eta_V * eta_A * rho * K)


@lru_cache(maxsize=None)
def stage1_linearisation() -> dict[str, Any]:
    """Jacobian and drift of the symmetric flow at the saddle, the slow (zeta, eta) block, its
    rescaling to ``[[0,1],[1,0]]`` and the closed-form solution from 0 (spec §3.4)."""
    rhs = sp.Matrix(_symmetric_loss_and_flow()[1])
    X = sp.Matrix([zeta, omega, xi, eta])
    J = sp.simplify(rhs.jacobian(X).subs(SADDLE))
    drift = sp.simplify(rhs.subs(SADDLE))
    # slow block on (zeta, eta), dropping the fast mean block (omega, xi at their saddle values)
    slow = sp.Matrix([[J[0, 0], J[0, 3]], [J[3, 0], J[3, 3]]])
    # rescale x = sqrt(eta_A K) zeta, y = sqrt(eta_V rho) eta, tau = sqrt(eta_V eta_A rho K) t
    tau = sp.Symbol("tau", nonnegative=True)
    Sx, Sy = sp.sqrt(eta_A * K), sp.sqrt(eta_V * rho)
    scale = sp.sqrt(eta_V * eta_A * rho * K)
    A_resc = sp.simplify(sp.diag(Sx, Sy) * slow * sp.diag(1 / Sx, 1 / Sy) / scale)
    b = sp.simplify(Sx * drift[0] / scale * T)  # drift enters x only, as b/T
    x_sol = b / T * sp.sinh(tau)
    y_sol = b / T * (sp.cosh(tau) - 1)
    return {
        "jacobian": J,
        "drift": drift,
        "slow_block": slow,
        "rescaled_block": A_resc,  # [[-sqrt(eta_V/(eta_A rho K))/T, 1], [1, 0]] -> [[0,1],[1,0]] as T -> inf
        "b": b,
        "tau": tau,
        "x": x_sol,
        "y": y_sol,
    }


# ------------------------------------------------------------------------------------------------
# Configuration and task instance (spec §1.2, §8 Decisions)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SCBConfig(ParamsBase):
    """Everything needed to build an SCB task, simulate it and train on it.

    Sizes: vocabulary ``N``, context ``T``, sparsity ``Q``. Learning rates ``eta_V``, ``eta_A`` are
    per optimiser step; one step consumes ``batch`` fresh sequences (online SGD).
    """

    N: int = 3
    T: int = 16
    Q: int = 2
    alpha: float = 1.0  # Dirichlet concentration of P's columns
    transition: str = "dirichlet"  # or "doubly_stochastic" (Decision 2)
    attention: str = "uniform"  # or "dirichlet" weights on the support (Decision 3)
    shared_support: bool = False
    query: str = "outside"  # Decision 1: "outside" (A, theory) or "last" (B)
    P: tuple | None = None  # explicit column-stochastic transition matrix (overrides generation)
    task_seed: int = 0
    eta_V: float = 0.05
    eta_A: float = 0.05
    lam: float = 0.0  # l1 strength (mu_k-weighted penalty, threshold eta_A*lam)
    lam_switch: float = 2.0  # l1 switches on when mean_k <a_k,q_k>*T >= lam_switch (Decision 7)
    batch: int = 1024
    steps: int = 400
    log_every: int = 5
    init: str = "mu"  # V = mu 1^T ("mu") or 11^T/N ("uniform")
    normalise: str = "end"  # "end", "step" (projection 1^T a_k = 1) or "none"
    seed: int = 0

    def validate(self) -> None:
        if self.N < 2:
            raise ConfigError("N", f"vocabulary size must be >= 2, got {self.N}")
        if self.T < 1:
            raise ConfigError("T", f"context length must be >= 1, got {self.T}")
        if self.Q < 1:
            raise ConfigError("Q", f"sparsity must be >= 1, got {self.Q}")
        if self.Q > self.T:
            raise ConfigError("Q", f"sparsity Q={self.Q} exceeds context length T={self.T}")
        if not self.alpha > 0:
            raise ConfigError("alpha", f"Dirichlet concentration must be > 0, got {self.alpha}")
        for name in ("eta_V", "eta_A"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(name, f"learning rate must be a finite number > 0, got {v}")
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"l1 strength must be >= 0, got {self.lam}")
        if self.batch < 1:
            raise ConfigError("batch", f"batch size must be >= 1, got {self.batch}")
        if self.steps < 1:
            raise ConfigError("steps", f"must be >= 1, got {self.steps}")
        if self.log_every < 1:
            raise ConfigError("log_every", f"must be >= 1, got {self.log_every}")
        for name, allowed in (
            ("transition", ("dirichlet", "doubly_stochastic")),
            ("attention", ("uniform", "dirichlet")),
            ("query", ("outside", "last")),
            ("init", ("mu", "uniform")),
            ("normalise", ("end", "step", "none")),
        ):
            check_choice(name, getattr(self, name), allowed)
        if self.P is not None:
            P = np.asarray(self.P, dtype=float)
            if P.shape != (self.N, self.N):
                raise ConfigError("P", f"expected an {self.N}x{self.N} matrix, got shape {P.shape}")
            if not np.all(np.isfinite(P)) or np.any(P < 0):
                raise ConfigError("P", "entries must be finite and non-negative")
            if not np.allclose(P.sum(axis=0), 1.0, atol=1e-9):
                raise ConfigError("P", f"not column-stochastic: column sums {np.round(P.sum(axis=0), 6).tolist()}")


@dataclass(frozen=True, eq=False)
class SCBTask:
    """A concrete SCB instance. Shapes: ``P`` (N, N) column-stochastic, ``mu`` (N,), ``Qm`` (T, N)
    with column k = q^(k), ``support`` (N, Q) int positions of each q^(k)."""

    P: np.ndarray
    mu: np.ndarray
    Qm: np.ndarray
    support: np.ndarray
    config: SCBConfig = field(repr=False)

    @property
    def N(self) -> int:
        return self.P.shape[0]

    @property
    def T(self) -> int:
        return self.Qm.shape[0]

    @property
    def Sigma(self) -> np.ndarray:
        return np.diag(self.mu) - np.outer(self.mu, self.mu)

    @property
    def K(self) -> float:
        """``tr(P Sigma P^T)``: how informative the transition is (spec §1.2)."""
        return float(np.trace(self.P @ self.Sigma @ self.P.T))

    @property
    def m2(self) -> float:
        return float(self.mu @ self.mu)

    @property
    def rho(self) -> np.ndarray:
        return (self.Qm**2).sum(axis=0)

    @property
    def P_tilde(self) -> np.ndarray:
        return self.P - np.outer(self.mu, np.ones(self.N))

    @property
    def symmetric(self) -> bool:
        return bool(np.allclose(self.rho, self.rho[0]))


def stationary_distribution(P: np.ndarray) -> np.ndarray:
    """``mu`` with ``P mu = mu``, ``1^T mu = 1``; raises if not unique (reducible chain)."""
    N = P.shape[0]
    A = np.vstack([P - np.eye(N), np.ones((1, N))])
    b = np.zeros(N + 1)
    b[-1] = 1.0
    mu, *_ = np.linalg.lstsq(A, b, rcond=None)
    eig = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    if N > 1 and abs(eig[1] - 1) < 1e-9:
        raise ConfigError("P", "transition matrix has no unique stationary distribution (reducible or periodic)")
    if np.any(mu <= 1e-12):
        raise ConfigError("P", "stationary distribution has zero entries (some tokens never occur)")
    return mu / mu.sum()


def _doubly_stochastic(N: int, rng: np.random.Generator) -> np.ndarray:
    M = rng.random((N, N)) + 0.1
    for _ in range(500):  # Sinkhorn
        M /= M.sum(axis=0, keepdims=True)
        M /= M.sum(axis=1, keepdims=True)
    return M / M.sum(axis=0, keepdims=True)


def make_task(config: SCBConfig, P: np.ndarray | None = None) -> SCBTask:
    """Draw ``P`` (Decision 2), its stationary ``mu`` and the sparse targets ``q^(k)`` (Decision 3)."""
    rng = np.random.default_rng(config.task_seed)
    N, T_, Q_ = config.N, config.T, config.Q
    if P is None and config.P is not None:
        P = np.asarray(config.P, dtype=float)
    if P is None:
        if config.transition == "dirichlet":
            P = rng.dirichlet(np.full(N, config.alpha), size=N).T
        else:
            P = _doubly_stochastic(N, rng)
    mu = stationary_distribution(P)
    Qm = np.zeros((T_, N))
    support = np.zeros((N, Q_), dtype=np.int64)
    shared = np.sort(rng.choice(T_, size=Q_, replace=False))
    for k in range(N):
        S = shared if config.shared_support else np.sort(rng.choice(T_, size=Q_, replace=False))
        weights = np.full(Q_, 1.0 / Q_) if config.attention == "uniform" else rng.dirichlet(np.ones(Q_))
        Qm[S, k] = weights
        support[k] = S
    return SCBTask(P=P, mu=mu, Qm=Qm, support=support, config=config)


def system_parameters(config: SCBConfig, task: SCBTask | None = None) -> dict[str, float]:
    """Values of the symmetric system's parameters for a task."""
    task = task or make_task(config)
    return {
        "T": float(task.T),
        "rho": float(task.rho.mean()),
        "K": task.K,
        "m2": task.m2,
        "eta_V": float(config.eta_V),
        "eta_A": float(config.eta_A),
    }


def initial_state(config: SCBConfig, task: SCBTask | None = None) -> dict[str, float]:
    """Initialisation ``a = 1/T``, ``V = mu 1^T`` (spec §2): zeta = 0, omega = 1, xi = 1/T, eta = 0.
    With ``init="uniform"`` (``V = 11^T/N``) the start is off the manifold; it is projected."""
    task = task or make_task(config)
    V0, A0 = initial_parameters(config, task)
    obs = observables_from_parameters(V0, A0, task)
    return {
        "zeta": float(obs["value_transition_correlation"]),
        "omega": float(obs["value_mean_scale"]),
        "xi": float(obs["attention_offsupport_level"]),
        "eta": float(obs["attention_target_coefficient"]),
    }


def initial_parameters(config: SCBConfig, task: SCBTask) -> tuple[np.ndarray, np.ndarray]:
    N, T_ = task.N, task.T
    V0 = np.outer(task.mu, np.ones(N)) if config.init == "mu" else np.full((N, N), 1.0 / N)
    A0 = np.full((T_, N), 1.0 / T_)
    return V0, A0


def systems(config: SCBConfig | None = None) -> list[ReducedSystem]:
    """The systems `tdyn derive scb` prints: symmetric 4-D, general (for config.N) and l1 forms."""
    N = (config or SCBConfig()).N
    return [symmetric_system(), general_system(N), l1_symmetric_system()]


# ------------------------------------------------------------------------------------------------
# Full-parameter population quantities (numpy; independent of the sympy derivation)
# ------------------------------------------------------------------------------------------------
def population_loss(V: np.ndarray, A: np.ndarray, task: SCBTask) -> np.ndarray:
    """Exact population loss (spec §3.1) for ``V`` (..., N, N), ``A`` (..., T, N)."""
    mu, P, Qm, Sig = task.mu, task.P, task.Qm, task.Sigma
    n = (A**2).sum(-2)
    c = (A * Qm).sum(-2)
    s = A.sum(-2)
    vv = np.einsum("...ij,jk,...ik->...", V, Sig, V)  # tr(V Sigma V^T)
    vp = np.einsum("...ij,jk,ik->...", V, Sig, P)  # tr(V Sigma P^T)
    v = V @ mu
    vmu = v @ mu
    vnorm = (v**2).sum(-1)
    rho = (Qm**2).sum(0)
    per_k = 0.5 * n * vv[..., None] - c * vp[..., None] + 0.5 * rho * task.K + 0.5 * (
        s**2 * vnorm[..., None] - 2 * s * vmu[..., None] + task.m2
    )
    return (per_k * mu).sum(-1) + 0.5 * (1 - task.m2 - task.K * (mu * rho).sum())


def population_gradient(V: np.ndarray, A: np.ndarray, task: SCBTask) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(grad_V L, grad_A L)`` of the population loss (spec §3.2)."""
    mu, P, Qm, Sig = task.mu, task.P, task.Qm, task.Sigma
    n, c, s = (A**2).sum(0), (A * Qm).sum(0), A.sum(0)
    v = V @ mu
    gV = (mu @ n) * V @ Sig - (mu @ c) * P @ Sig + np.outer((mu * s**2).sum() * v - (mu * s).sum() * mu, mu)
    vv = np.trace(V @ Sig @ V.T)
    vp = np.trace(V @ Sig @ P.T)
    gA = mu * (vv * A - vp * Qm + (s * (v @ v) - mu @ v)[None, :])
    return gV, gA


def preconditioned_flow(V, A, task: SCBTask, eta_V_: float, eta_A_: float):
    """``(dV/dt, dA/dt) = (-eta_V grad_V L D^{-1}, -eta_A grad_{a_k} L / mu_k)`` (spec §3.3)."""
    gV, gA = population_gradient(V, A, task)
    return -eta_V_ * gV / task.mu[None, :], -eta_A_ * gA / task.mu[None, :]


def observables_from_parameters(V, A, task: SCBTask) -> dict[str, np.ndarray]:
    """The §4 observables of full parameters, with the theory's names. Works on leading batch
    axes: ``V`` (..., N, N), ``A`` (..., T, N). Attention observables are plain means over
    queries k."""
    V = np.asarray(V, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    mu, Pt = task.mu, task.P_tilde
    N, T_ = task.N, task.T
    Vt = V - (V @ mu)[..., :, None] * np.ones(N)
    zeta_hat = np.einsum("...ij,ij->...", Vt, Pt) / (Pt**2).sum()
    omega_hat = np.einsum("i,...ij,j->...", mu, V, mu) / task.m2
    on = np.zeros((T_, N), dtype=bool)
    for k in range(N):
        on[task.support[k], k] = True
    Qk = on.sum(0)
    rho_k = (task.Qm**2).sum(0)
    mass_on = (A * on).sum(-2)
    mean_on = mass_on / Qk
    mean_off = np.where(T_ > Qk, (A * ~on).sum(-2) / np.maximum(T_ - Qk, 1), 0.0)
    s = A.sum(-2)
    c = (A * task.Qm).sum(-2)
    n = (A**2).sum(-2)
    colsum = V.sum(-2, keepdims=True)
    dist_V = np.sqrt(((V / colsum - task.P) ** 2).sum((-2, -1))) / np.sqrt((Pt**2).sum())
    dist_A = np.sqrt(((A / s[..., None, :] - task.Qm) ** 2).sum(-2).mean(-1))
    return {
        "value_transition_correlation": zeta_hat,
        "value_mean_scale": omega_hat,
        "attention_offsupport_level": mean_off.mean(-1),
        # eta = (mean on-support - mean off-support) / (mean on-support entry of q_k; = rho for uniform q)
        "attention_target_coefficient": ((mean_on - mean_off) / ((task.Qm * on).sum(0) / Qk)).mean(-1),
        "attention_target_overlap": c.mean(-1),
        "attention_sum": s.mean(-1),
        "attention_sq_norm": n.mean(-1),
        "attention_mass_on_support": mass_on.mean(-1),
        "population_loss": population_loss(V, A, task),
        "value_relative_distance_to_truth": dist_V,
        "attention_distance_to_truth": dist_A,
        "value_off_manifold_residual": np.sqrt(
            ((Vt - zeta_hat[..., None, None] * Pt) ** 2).sum((-2, -1))
        ),
    }


# ------------------------------------------------------------------------------------------------
# Minibatch-SGD SDE on the full parameters (spec §3.6, option A), in jax
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class MinibatchSDE:
    """``d theta = drift dt + diffusion dW`` on theta = (V, A) flattened, time in optimiser steps.

    * drift: the preconditioned population flow (exact, spec §3.2-3.3);
    * diffusion: minibatch noise. Its covariance is ``lr^2 Cov_sample(preconditioned g)/B``; the
      covariance is estimated at the current theta from ``mc_samples`` fresh per-sample gradients
      (spec §3.6 option A), and enters as the matrix ``lr * (g_m - mean g)/sqrt((M-1) B)`` driven by
      an M-dimensional Brownian motion, so no covariance matrix or square root is ever formed.
    Float64 throughout.
    """

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 64
    paper: str = PAPER
    name: str = "minibatch_sgd"

    @property
    def dim(self) -> int:
        return self.task.N ** 2 + self.task.T * self.task.N

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return np.concatenate([V0.ravel(), A0.ravel()])

    def args(self):
        import jax.numpy as jnp

        t = self.task
        return {
            "P": jnp.asarray(t.P), "mu": jnp.asarray(t.mu), "Qm": jnp.asarray(t.Qm),
            "Sig": jnp.asarray(t.Sigma),
            "lr_V": jnp.asarray(self.eta_V), "lr_A": jnp.asarray(self.eta_A),
            "batch": jnp.asarray(float(self.batch)),
        }

    def _unflatten(self, y):
        N, T_ = self.task.N, self.task.T
        return y[: N * N].reshape(N, N), y[N * N:].reshape(T_, N)

    def drift(self, t, y, args):
        import jax.numpy as jnp

        V, A = self._unflatten(y)
        mu, P, Qm, Sig = args["mu"], args["P"], args["Qm"], args["Sig"]
        n, c, s = (A**2).sum(0), (A * Qm).sum(0), A.sum(0)
        v = V @ mu
        gV = (mu @ n) * V @ Sig - (mu @ c) * P @ Sig + jnp.outer((mu * s**2).sum() * v - (mu * s).sum() * mu, mu)
        vv = jnp.trace(V @ Sig @ V.T)
        vp = jnp.trace(V @ Sig @ P.T)
        gA = mu * (vv * A - vp * Qm + (s * (v @ v) - mu @ v)[None, :])
        return jnp.concatenate([(-args["lr_V"] * gV / mu[None, :]).ravel(), (-args["lr_A"] * gA / mu[None, :]).ravel()])

    def per_sample_gradients(self, y, args, key):
        """(M, dim) preconditioned per-sample gradients at theta (spec §3.2), M = mc_samples.
        Data drawn exactly as spec §1.2 (query outside the context)."""
        import jax
        import jax.numpy as jnp

        N, T_, M = self.task.N, self.task.T, self.mc_samples
        V, A = self._unflatten(y)
        mu, P, Qm = args["mu"], args["P"], args["Qm"]
        kx, kk, ks, ko = jax.random.split(key, 4)
        logmu = jnp.log(mu)
        x = jax.random.categorical(kx, logmu, shape=(M, T_))
        k = jax.random.categorical(kk, logmu, shape=(M,))
        logq = jnp.where(Qm.T[k] > 0, jnp.log(jnp.where(Qm.T[k] > 0, Qm.T[k], 1.0)), -jnp.inf)
        pos = jax.random.categorical(ks, logq, axis=-1)
        xs = jnp.take_along_axis(x, pos[:, None], axis=1)[:, 0]
        logP = jnp.log(jnp.maximum(P.T[xs], 1e-300))
        xo = jax.random.categorical(ko, logP, axis=-1)

        # batched over the M samples; X a via a one-hot contraction over the N token ids
        Xoh = jax.nn.one_hot(x, N, dtype=y.dtype)  # (M, T, N)
        a = A.T[k]  # (M, T): a^(k_m)
        Xa = jnp.einsum("mtn,mt->mn", Xoh, a)
        r = Xa @ V.T - jax.nn.one_hot(xo, N, dtype=y.dtype)  # (M, N)
        gV = r[:, :, None] * Xa[:, None, :] / mu[None, None, :]  # r (X a)^T D^-1
        ga = jnp.take_along_axis(r @ V, x, axis=1) / mu[k][:, None]  # (X^T V^T r) / mu_k, (M, T)
        gA = ga[:, :, None] * jax.nn.one_hot(k, N, dtype=y.dtype)[:, None, :]  # only column k_m
        return jnp.concatenate([args["lr_V"] * gV.reshape(M, -1), args["lr_A"] * gA.reshape(M, -1)], axis=1)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        G = self.per_sample_gradients(y, args, key)
        G = G - G.mean(0, keepdims=True)
        return (G / jnp.sqrt((self.mc_samples - 1) * args["batch"])).T  # (dim, M)

    def state_variables(self, Y: np.ndarray) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Split ``Y`` (..., dim) into named variables with extra dims for the Dataset."""
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return {
            "V": (("row", "col"), Y[..., : N * N].reshape(*lead, N, N)),
            "A": (("position", "query"), Y[..., N * N:].reshape(*lead, T_, N)),
        }

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        V = Y[..., : N * N].reshape(*lead, N, N)
        A = Y[..., N * N:].reshape(*lead, T_, N)
        return observables_from_parameters(V, A, self.task)


# ------------------------------------------------------------------------------------------------
# CLI conventions (figures/cli.py)
# ------------------------------------------------------------------------------------------------
Config = SCBConfig


def default_run(config: SCBConfig) -> dict[str, Any]:
    """The ODE that `tdyn simulate scb` integrates: the symmetric system over ``config.steps``."""
    task = make_task(config)
    if not task.symmetric:
        raise ConfigError("attention", "the 4-D system needs uniform q (symmetric rho_k); use general_system")
    n = config.steps // config.log_every + 1
    return {
        "system": symmetric_system(),
        "params": system_parameters(config, task),
        "y0": initial_state(config, task),
        "t": np.linspace(0.0, float(config.steps), n),
    }


def minibatch_sde(config: SCBConfig, mc_samples: int = 64):
    """``(sde, t)`` for `tdyn simulate scb --sde`: minibatch SGD on the full (V, A)."""
    task = make_task(config)
    sde = MinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples)
    n = config.steps // config.log_every + 1
    return sde, np.linspace(0.0, float(config.steps), n)


def problem(config) -> "Problem":
    """The :class:`~theory.Problem` that ``tdyn simulate`` integrates (wraps :func:`default_run`)."""
    from .problem import Problem

    run = default_run(config)
    return Problem(run["system"], run["params"], run["y0"], run["t"], run.get("solve_options", {}))
