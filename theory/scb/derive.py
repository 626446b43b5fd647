"""SCB derivation: population loss on the invariant manifold -> preconditioned flow (papers/scb.md §3).

Nothing here is typed from the paper's printed equations:

1. the exact population loss from the moment identity ``E[X a b^T X^T] = <a,b> Sigma +
   (1^T a)(1^T b) mu mu^T`` (spec §3.1), evaluated on the invariant manifold
   ``V = zeta*P_tilde + omega*mu 1^T``, ``a_k = xi_k 1 + beta_k q_k`` through Gram tables;
2. the preconditioned gradient flow by differentiation, with the preconditioner's metric pulled
   back to the coordinates (spec §3.3): the symmetric 4-D system and the general 2+2N system;
3. the l1/proximal variant in the ``(u, w)`` coordinates (spec §3.3);
4. the stage-1 linearisation by a sympy Jacobian, its closed-form solution and the escape time
   (spec §3.4).

The exported systems are written with the spec's named quantities as ``definitions``
(``s = 1^T a``, ``n = |a|^2``, ``c = <a, q>``, spec §3.3) and the printed right-hand sides are
checked against the derived ones at construction (:func:`_printed`), never the reverse.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sympy as sp

from ..algebra import BilinearForm, Coords, natural_gradient_flow
from ..core import TIME, ReducedSystem
from ..errors import ConfigError
from .config import PAPER, SPEC

__all__ = [
    "symmetric_system", "general_system", "l1_symmetric_system", "l1_general_system",
    "loss_symmetric", "stage1_linearisation", "escape_time_formula", "moment_form", "query_loss",
    "CORRELATION_OBSERVABLES", "ESCAPE_LEVEL",
    "zeta", "omega", "xi", "beta", "u", "w", "T", "Q", "rho", "K", "m2", "eta_V", "eta_A",
]


# Symbols ----------------------------------------------------------------------------------------
# a_k = xi_k 1 + beta_k q_k: beta is the spec's eta_k (papers/scb.md §3.3), renamed so that the state
# does not read as one of the learning rates eta_V, eta_A
zeta, omega, xi, beta = sp.symbols("zeta omega xi beta", real=True)
u, w = sp.symbols("u w", real=True)
T, Q, rho, K, m2 = sp.symbols("T Q rho K m2", positive=True)
eta_V, eta_A = sp.symbols("eta_V eta_A", positive=True)

#: Observables that measure learned correlation (acceptance: rel_l2 <= 0.05 against the ODE).
CORRELATION_OBSERVABLES = ("value_transition_correlation", "attention_target_overlap")
#: Escape = first time the attention coefficient beta reaches this level (spec §3.4 test values).
ESCAPE_LEVEL = 0.5


# ------------------------------------------------------------------------------------------------
# 1. Gram tables: the lemmas behind the reduction (each checked numerically in tests/theory/scb/test_derive.py)
# ------------------------------------------------------------------------------------------------
# Matrix basis (P_tilde, mu 1^T); P = P_tilde + mu 1^T has coordinates (1, 1).  papers/scb.md §3.3
#   tr(X Sigma Y^T):  Sigma 1 = 0 kills mu1^T;  P_tilde Sigma = P Sigma  -> tr(P Sigma P^T) = K
SIGMA_FORM = BilinearForm(sp.Matrix([[K, 0], [0, 0]]), "tr(X Sigma Y^T)")
#   (X mu)^T (Y mu):  P_tilde mu = 0,  mu 1^T mu = mu  -> m2 = |mu|^2
MEAN_FORM = BilinearForm(sp.Matrix([[0, 0], [0, m2]]), "(X mu)^T (Y mu)")
#   tr(X D Y^T), D = diag(mu): the metric of the preconditioner V <- V - eta_V grad D^{-1}
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
# The spec's named quantities of one query's attention (spec §3.3): s = 1^T a, n = |a|^2, c = <a, q>.
s_, n_, c_ = sp.symbols("s n c", real=True)


def _printed(name: str, derived, printed, definitions) -> tuple[sp.Expr, ...]:
    """The printed right-hand sides (written with the named quantities), after checking that with
    the definitions substituted they equal the derived ones exactly. Raises if they differ."""
    for i, (d, p) in enumerate(zip(derived, printed, strict=True)):
        if sp.cancel(sp.together(_expand(p, definitions) - d)) != 0:
            raise AssertionError(f"scb/{name}: printed rhs {i} differs from the derived flow")
    return tuple(printed)


def _system(name: str, state, parameters, derived, printed, definitions, **kw) -> ReducedSystem:
    """A :class:`ReducedSystem` of this paper whose printed rhs was checked against ``derived``."""
    return ReducedSystem(name=name, paper=PAPER, state=state, parameters=parameters,
                         rhs=_printed(name, derived, printed, definitions), definitions=definitions, **kw)


def _expand(expr, definitions):
    for sym, e in reversed(definitions):
        expr = expr.xreplace({sym: e})
    return expr


def _sym_observables(xi_, beta_, zeta_, omega_, T_, rho_, loss):
    s = T_ * xi_ + beta_
    n = T_ * xi_**2 + 2 * xi_ * beta_ + rho_ * beta_**2
    c = xi_ + rho_ * beta_
    # |a/s - q|^2 = (xi 1 + (beta - s) q)^T (...) / s^2 in the Gram table of (1, q)
    dist2 = (T_ * xi_**2 + 2 * xi_ * (beta_ - s) + rho_ * (beta_ - s) ** 2) / s**2
    return {
        "value_transition_correlation": zeta_,  # <V - V mu 1^T, P_tilde>/|P_tilde|^2   (§4)
        "value_mean_scale": omega_,  # mu^T V mu / m2
        "attention_offsupport_level": xi_,  # mean off-support entry of a_k
        "attention_target_coefficient": beta_,  # (mean on-support - mean off-support)/rho
        "attention_target_overlap": c,  # <a_k, q_k>
        "attention_sum": s,  # 1^T a_k
        "attention_sq_norm": n,  # |a_k|^2
        "attention_mass_on_support": xi_ / rho_ + beta_,  # sum over S_k (uniform q: |S_k| = 1/rho)
        "population_loss": loss,
        "value_relative_distance_to_truth": sp.Abs(zeta_ / omega_ - 1),  # |V/colsum - P|_F/|P_tilde|_F
        "attention_distance_to_truth": sp.sqrt(dist2),  # rms_k |a_k/1^T a_k - q_k|
    }


def _flow_in_named_quantities(s, n, c):
    """The spec §3.3 form of one query's flow: (zeta, omega) contributions and the attention
    'mean' term ``m2 omega (s omega - 1)``, shared by every system below."""
    mean = m2 * omega * (s * omega - 1)
    return eta_V * (c - n * zeta), -eta_V * s * (s * omega - 1), mean


@lru_cache(maxsize=None)
def symmetric_system() -> ReducedSystem:
    """The 4-D system (zeta, omega, xi, beta) for symmetric attention targets (all rho_k = rho).

    Every query shares (xi, beta), so the loss is sum_k mu_k L_k = L_k and the attention metric
    (the a_k/mu_k preconditioner's mu_k <da, da>, summed over k) is the Gram table of (1, q).
    (spec §3.3)
    """
    loss, raw_rhs = _symmetric_loss_and_flow()
    defs = ((s_, T * xi + beta), (n_, T * xi**2 + 2 * xi * beta + rho * beta**2), (c_, xi + rho * beta))
    dz, do, mean = _flow_in_named_quantities(s_, n_, c_)
    printed = (dz, do, -eta_A * (K * zeta**2 * xi + mean), eta_A * K * zeta * (1 - zeta * beta))
    obs = _sym_observables(xi, beta, zeta, omega, T, rho, loss)
    lin = stage1_linearisation()
    tau_of_t = sp.sqrt(eta_V * eta_A * rho * K) * TIME
    return _system(
        "symmetric", (zeta, omega, xi, beta), (T, rho, K, m2, eta_V, eta_A), raw_rhs, printed, defs,
        observables=obs,
        invariants={},
        closed_forms={
            "escape_time": escape_time_formula(),
            "stage1_x": lin["x"].xreplace({lin["tau"]: tau_of_t}),  # sqrt(eta_A K) zeta, linearised
            "stage1_y": lin["y"].xreplace({lin["tau"]: tau_of_t}),  # sqrt(eta_V rho) beta, linearised
            "minimal_loss": sp.Rational(1, 2) * (1 - m2 - K * rho),
        },
        spec=f"{SPEC} §3.3 (symmetric case)",
        description=(
            "Preconditioned population gradient flow of the linear transformer on SCB data, "
            "restricted to its exact invariant manifold V = zeta*P_tilde + omega*mu1^T, "
            "a_k = xi*1 + beta*q_k; s = 1^T a, n = |a|^2, c = <a, q>. "
            "Time is in optimiser steps (eta_V, eta_A are learning rates)."
        ),
    )


@lru_cache(maxsize=None)
def _symmetric_loss_and_flow() -> tuple[sp.Expr, tuple[sp.Expr, ...]]:
    """Population loss on the symmetric manifold and its preconditioned flow (spec §3.3)."""
    inner, ones, qc = _attention_basis(T, rho)
    V = Coords.of(zeta, omega)
    a = ones.scale(xi) + qc.scale(beta)
    loss = sp.expand(query_loss(V, a, inner, ones, qc))
    rhs = natural_gradient_flow(
        loss, [((zeta, omega), V_METRIC.metric(), eta_V), ((xi, beta), inner.metric(), eta_A)])
    return loss, tuple(rhs)


def loss_symmetric() -> sp.Expr:
    """The exact population loss on the symmetric manifold, constants included (spec §3.1)."""
    return _symmetric_loss_and_flow()[0]


def _indexed(name: str, n: int, **assumptions) -> tuple[sp.Symbol, ...]:
    return tuple(sp.Symbol(f"{name}_{i}", **assumptions) for i in range(1, n + 1))


@lru_cache(maxsize=None)
def general_system(N: int) -> ReducedSystem:
    """The (2 + 2N)-D system for arbitrary q^(k) (rho_k per query) and mu: state
    (zeta, omega, xi_1..xi_N, beta_1..beta_N).   (spec §3.3 "General reduced ODE")"""
    if N < 1:
        raise ConfigError("N", "must be >= 1")
    xis = _indexed("xi", N, real=True)
    betas = _indexed("beta", N, real=True)
    mus = _indexed("mu", N, positive=True)
    rhos = _indexed("rho", N, positive=True)
    ss, ns, cs = _indexed("s", N, real=True), _indexed("n", N, real=True), _indexed("c", N, real=True)
    V = Coords.of(zeta, omega)
    loss = 0
    blocks: list = [((zeta, omega), V_METRIC.metric(), eta_V)]
    for k in range(N):
        inner, ones, qc = _attention_basis(T, rhos[k])
        a = ones.scale(xis[k]) + qc.scale(betas[k])
        loss += mus[k] * query_loss(V, a, inner, ones, qc)
    loss = sp.expand(loss)
    for k in range(N):
        inner, _, _ = _attention_basis(T, rhos[k])
        blocks.append(((xis[k], betas[k]), inner.metric(mus[k]), eta_A))  # metric mu_k <da, da>
    rhs = natural_gradient_flow(loss, blocks)
    # reorder: zeta, omega, xi_1, beta_1, ... -> zeta, omega, xi_1..xi_N, beta_1..beta_N
    derived = (rhs[0], rhs[1], *(rhs[2 + 2 * k] for k in range(N)), *(rhs[3 + 2 * k] for k in range(N)))
    defs = tuple((ss[k], T * xis[k] + betas[k]) for k in range(N)) + tuple(
        (ns[k], T * xis[k] ** 2 + 2 * xis[k] * betas[k] + rhos[k] * betas[k] ** 2) for k in range(N)) + tuple(
        (cs[k], xis[k] + rhos[k] * betas[k]) for k in range(N))
    parts = [_flow_in_named_quantities(ss[k], ns[k], cs[k]) for k in range(N)]
    printed = (sp.Add(*(mus[k] * parts[k][0] for k in range(N))),
               sp.Add(*(mus[k] * parts[k][1] for k in range(N))),
               *(-eta_A * (K * zeta**2 * xis[k] + parts[k][2]) for k in range(N)),
               *(eta_A * K * zeta * (1 - zeta * betas[k]) for k in range(N)))
    obs = {
        "value_transition_correlation": zeta,
        "value_mean_scale": omega,
        "attention_target_overlap": sum(xis[k] + rhos[k] * betas[k] for k in range(N)) / N,
        "attention_sum": sum(T * xis[k] + betas[k] for k in range(N)) / N,
        "population_loss": loss,
    }
    return _system(
        "general", (zeta, omega, *xis, *betas), (T, K, m2, eta_V, eta_A, *mus, *rhos), derived, printed, defs,
        observables=obs,
        spec=f"{SPEC} §3.3 (general reduced ODE, N={N})",
        description="Per-query reduced flow; exact for any q^(k), mu and P (lambda = 0). "
                    "s_k = 1^T a_k, n_k = |a_k|^2, c_k = <a_k, q_k>.",
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
    raw = natural_gradient_flow(
        loss, [((zeta, omega), V_METRIC.metric(), eta_V), ((u, w), inner.metric(), eta_A)]
    )
    s = (T - Q) * u + Q * w
    defs = ((s_, s), (n_, (T - Q) * u**2 + Q * w**2), (c_, w))  # <a, q> = Q * w * (1/Q)
    dz, do, mean = _flow_in_named_quantities(s_, n_, c_)
    printed = (dz, do, -eta_A * (K * zeta**2 * u + mean), -eta_A * (K * zeta**2 * w - K * zeta / Q + mean))
    return _system(
        "l1_symmetric", (zeta, omega, u, w), (T, Q, K, m2, eta_V, eta_A), raw, printed, defs,
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
        description="Gradient part of the proximal map; the prox soft-thresholds u and w at eta_A*lambda. "
                    "s = 1^T a, n = |a|^2, c = <a, q>.",
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
        name="l1_general",
        paper=PAPER,
        state=state,
        parameters=(T, K, m2, eta_V, eta_A, *mus, *(x for k in range(N) for x in qb[k])),
        rhs=tuple(rhs),
        observables={"value_transition_correlation": zeta, "value_mean_scale": omega, "population_loss": loss},
        spec=f"{SPEC} §3.3 (l1, u-w form, general q; Q={Qn} support positions per query)",
        description="Gradient part of the proximal map; the prox soft-thresholds u_k and w_k at eta_A*lambda.",
    )


# ------------------------------------------------------------------------------------------------
# 3. Stage 1 (spec §3.4)
# ------------------------------------------------------------------------------------------------
SADDLE = {zeta: 0, omega: 1, xi: 1 / T, beta: 0}


def escape_time_formula() -> sp.Expr:
    """``t* = log(T sqrt(rho)) / sqrt(eta_V eta_A rho K)``: the time for the rescaled linear system
    ``x' = y + b/T, y' = x`` started at 0 to reach O(1), ``b = sqrt(eta_V/rho)`` (spec §3.4)."""
    return sp.log(T * sp.sqrt(rho)) / sp.sqrt(eta_V * eta_A * rho * K)


@lru_cache(maxsize=None)
def stage1_linearisation() -> dict[str, Any]:
    """Jacobian and drift of the symmetric flow at the saddle, the slow (zeta, beta) block, its
    rescaling to ``[[0,1],[1,0]]`` and the closed-form solution from 0 (spec §3.4)."""
    rhs = sp.Matrix(_symmetric_loss_and_flow()[1])
    X = sp.Matrix([zeta, omega, xi, beta])
    J = sp.simplify(rhs.jacobian(X).subs(SADDLE))
    drift = sp.simplify(rhs.subs(SADDLE))
    # slow block on (zeta, beta), dropping the fast mean block (omega, xi at their saddle values)
    slow = sp.Matrix([[J[0, 0], J[0, 3]], [J[3, 0], J[3, 3]]])
    # rescale x = sqrt(eta_A K) zeta, y = sqrt(eta_V rho) beta, tau = sqrt(eta_V eta_A rho K) t
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

