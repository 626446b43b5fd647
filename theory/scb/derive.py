"""SCB derivation: population loss on the invariant manifold -> preconditioned flow (docs/papers/scb.md §3).

Nothing here is typed from the paper's printed equations:

1. the exact population loss from the moment identity ``E[X a b^T X^T] = <a,b> Sigma +
   (1^T a)(1^T b) mu mu^T`` (spec §3.1), evaluated on the invariant manifold
   ``V = zeta*P_tilde + omega*mu 1^T``, ``a_k = xi_k 1 + beta_k q_k`` through Gram tables;
2. the preconditioned gradient flow by differentiation, with the preconditioner's metric pulled
   back to the coordinates (spec §3.3): the symmetric 4-D system and the general 2+2N system;
3. the l1/proximal variant in the ``(u, w)`` coordinates (spec §3.3);
4. the stage-1 linearisation by a sympy Jacobian, its closed-form solution and the escape time
   (spec §3.4);
5. the minibatch noise: the squared loss of one sequence (:func:`per_sample_loss`, whose
   expectation is the population loss of step 1) differentiated with the flow's own
   preconditioner — on the manifold (:func:`noise_system`), on the full ``(V, A)``
   (:func:`full_system`), and the off-manifold parts that feed the reduced SDE's energies
   (:func:`off_manifold_norms`, :func:`closure_system`; spec §3.6).

The exported systems are written with the spec's named quantities as ``definitions``
(``s = 1^T a``, ``n = |a|^2``, ``c = <a, q>``, spec §3.3) and the printed right-hand sides are
checked against the derived ones at construction (:func:`_printed`), never the reverse.
"""

from __future__ import annotations

import dataclasses
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
    "per_sample_loss", "noise_system", "closure_system", "off_manifold_norms", "full_system", "full_symbols",
    "statistic_symbols", "energy_symbols", "transition_matrix", "manifold_value_matrix",
    "CORRELATION_OBSERVABLES", "ESCAPE_LEVEL",
    "zeta", "omega", "xi", "beta", "u", "w", "T", "Q", "rho", "K", "m2", "eta_V", "eta_A",
]


# Symbols ----------------------------------------------------------------------------------------
# a_k = xi_k 1 + beta_k q_k: beta is the spec's eta_k (docs/papers/scb.md §3.3), renamed so that the state
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
# Matrix basis (P_tilde, mu 1^T); P = P_tilde + mu 1^T has coordinates (1, 1).  docs/papers/scb.md §3.3
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


def query_loss(V: Coords, a: Coords, inner, ones: Coords, q: Coords, energies=(0, 0, 0)) -> sp.Expr:
    """Population loss of one query: the expectation of :func:`per_sample_loss`
    ``E ||y - V X a||^2 / 2`` over the context and target with ``E[y|X,k] = P X q``:
    ``1/2 E|y|^2 - E[y^T V X a] + 1/2 E|V X a|^2``, ``|y| = 1`` (one-hot target), each moment by
    the moment identity (:func:`moment_form`; checked against the exact expectation of the
    per-sample loss in tests/theory/scb/test_noise.py).

    ``energies = (E_V, E_v, E_a)``: off the manifold, the parts of ``V`` and ``a`` orthogonal to
    the bases (``R`` in the Sigma norm, ``r_v`` in the mean form, ``delta`` in ``<., .>``) are
    orthogonal to every basis element and to ``P``, ``q``, so they enter the loss only through
    ``tr(V Sigma V^T) + E_V``, ``|V mu|^2 + E_v`` and ``|a|^2 + E_a`` (theory.scb.sde)."""
    E_V, E_v, E_a = energies
    cross = moment_form(V, P_COORDS, a, q, inner, ones)  # E[(P X q)^T V X a]
    # E|V X a|^2 = <a,a> tr(V Sigma V^T) + (1^T a)^2 |V mu|^2 (moment identity), energies added
    quad = (inner(a, a) + E_a) * (SIGMA_FORM(V, V) + E_V) + inner(a, ones) ** 2 * (MEAN_FORM(V, V) + E_v)
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
            r"restricted to its exact invariant manifold $V = \zeta \tilde{P} + \omega \mu \mathbf{1}^\top$, "
            r"$a_k = \xi \mathbf{1} + \beta q_k$; $s = \mathbf{1}^\top a$, $n = \|a\|^2$, $c = \langle a, q\rangle$. "
            r"Time is in optimiser steps ($\eta_V$, $\eta_A$ are learning rates)."
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


def _loss_and_flow(N: int, xis, betas, mus, rhos, energies=None):
    """The population loss of the (V, a_1..a_N) coordinates, sum_k mu_k L_k (spec §3.3), expanded,
    and its preconditioned natural-gradient flow (metric <dV, dV> for (zeta, omega) at rate eta_V,
    mu_k <da, da> for (xi_k, beta_k) at rate eta_A). ``energies`` = (E_V, E_v, [E_a_k]): the
    off-manifold energies entering each query's loss (:func:`query_loss`)."""
    V = Coords.of(zeta, omega)
    loss = 0
    blocks: list = [((zeta, omega), V_METRIC.metric(), eta_V)]
    for k in range(N):
        inner, ones, qc = _attention_basis(T, rhos[k])
        a = ones.scale(xis[k]) + qc.scale(betas[k])
        extra = () if energies is None else ((energies[0], energies[1], energies[2][k]),)
        loss += mus[k] * query_loss(V, a, inner, ones, qc, *extra)
        blocks.append(((xis[k], betas[k]), inner.metric(mus[k]), eta_A))  # metric mu_k <da, da>
    loss = sp.expand(loss)
    return loss, natural_gradient_flow(loss, blocks)


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
    loss, rhs = _loss_and_flow(N, xis, betas, mus, rhos)
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
        description=(r"Per-query reduced flow; exact for any $q^{(k)}$, $\mu$ and $P$ ($\lambda = 0$). "
                     r"$s_k = \mathbf{1}^\top a_k$, $n_k = \|a_k\|^2$, $c_k = \langle a_k, q_k\rangle$."),
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
        description=(r"Gradient part of the proximal map; the prox soft-thresholds $u$ and $w$ at $\eta_A \lambda$. "
                     r"$s = \mathbf{1}^\top a$, $n = \|a\|^2$, $c = \langle a, q\rangle$."),
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
        description=r"Gradient part of the proximal map; the prox soft-thresholds $u_k$ and $w_k$ at $\eta_A \lambda$.",
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



# ------------------------------------------------------------------------------------------------
# 4. The per-sample loss and the minibatch noise (spec §2, §3.2, §3.6)
# ------------------------------------------------------------------------------------------------
# One sample is one sequence: the query k, the context X (N x T one-hot columns) and the target y
# (one-hot). The model reads the context only through h = X a^(k), the attention-weighted token
# histogram, so the loss of one sequence is a function of (V, h, y):

def per_sample_loss(V: sp.Matrix, h, y) -> sp.Expr:
    """``l = |y - V h|^2 / 2``: the squared loss of one sequence (spec §2), ``h = X a^(k)`` (N,),
    ``y`` the one-hot target (N,). Its expectation over the data is :func:`query_loss` (the
    drift's loss); its gradient, with the flow's preconditioner, is the per-sample flow of the
    noise (:func:`noise_system`, :func:`full_system`)."""
    r = sp.Matrix(list(y)) - V * sp.Matrix(list(h))
    return (r.T * r)[0, 0] / 2


def _mus(N: int) -> tuple[sp.Symbol, ...]:
    return _indexed("mu", N, positive=True)


def transition_matrix(N: int) -> sp.Matrix:
    """``P`` with symbolic entries ``P_i_j`` (column-stochastic, ``P mu = mu`` at a valid task)."""
    return sp.Matrix(N, N, lambda i, j: sp.Symbol(f"P_{i + 1}_{j + 1}", nonnegative=True))


def manifold_value_matrix(N: int) -> sp.Matrix:
    """``V = zeta P_tilde + omega mu 1^T`` with ``P_tilde = P - mu 1^T`` (spec §3.3)."""
    mu = sp.Matrix(_mus(N))
    ones = sp.ones(1, N)
    return zeta * (transition_matrix(N) - mu * ones) + omega * mu * ones


def statistic_symbols(N: int) -> dict[str, tuple[sp.Symbol, ...]]:
    """The sample symbols of the reduced noise: what one sequence contributes on the manifold
    ``a_k = xi_k 1 + beta_k q_k`` (``X a_k = xi_k X 1 + beta_k X q_k``): the one-hot query
    ``kappa``, ``b = X q_kappa``, the token counts ``nu = X 1`` and the one-hot target ``y``."""
    return {name: _indexed(name, N, real=True) for name in ("kappa", "b", "nu", "y")}


def _reduced_preconditioner(N: int) -> sp.Matrix:
    """The general system's map ``rhs = -M grad L``: ``eta_V`` times the inverse of the V metric
    ``tr(X D Y^T)`` on (zeta, omega) (``diag(K, m2)``), ``eta_A`` times the inverse of
    ``mu_k G_k``, ``G_k = [[T, 1], [1, rho_k]]``, on (xi_k, beta_k) (spec §3.3; the blocks of
    :func:`general_system`)."""
    d = 2 + 2 * N
    M = sp.zeros(d, d)
    M[:2, :2] = eta_V * V_METRIC.metric().inv()
    for k, (mu_k, rho_k) in enumerate(zip(_mus(N), _indexed("rho", N, positive=True))):
        block = eta_A * _attention_basis(T, rho_k)[0].metric(mu_k).inv()
        idx = (2 + k, 2 + N + k)
        for a in range(2):
            for b in range(2):
                M[idx[a], idx[b]] = sp.simplify(block[a, b])
    return M


def _reduced_sample(N: int):
    """(``l`` on the manifold, ``h``, ``V``) of one sample in :func:`statistic_symbols`."""
    st = statistic_symbols(N)
    G = general_system(N)
    xis, betas = G.state[2:2 + N], G.state[2 + N:]
    nu, b = sp.Matrix(st["nu"]), sp.Matrix(st["b"])
    h = sp.zeros(N, 1)
    for k in range(N):
        h += st["kappa"][k] * (xis[k] * nu + betas[k] * b)
    V = manifold_value_matrix(N)
    return per_sample_loss(V, h, st["y"]), h, V


def statistics_law(N: int):
    """The exact law of one sequence's statistics ``(kappa, b, nu, y)`` (:func:`statistic_symbols`)
    by its moment generating function, for uniform ``q`` on ``Q = 1/rho_1`` positions (Decision 3):
    the query ``kappa = e_k``, ``k ~ mu``, independent of the rest; the chosen support token
    ``x_s = j ~ mu``, the target ``y = e_i`` with ``i ~ P[:, j]``, the other ``Q - 1`` support
    tokens' counts ``c ~ Multinomial(Q - 1, mu)`` and the ``T - Q`` off-support counts
    ``o ~ Multinomial(T - Q, mu)``, so ``b = (e_j + c)/Q``, ``nu = e_j + c + o``:

        E exp(t_y.y + t_b.b + t_nu.nu) = sum_j mu_j e^{t_b,j/Q + t_nu,j} (sum_i P_ij e^{t_y,i})
            (sum_i mu_i e^{t_b,i/Q + t_nu,i})^(Q-1) (sum_i mu_i e^{t_nu,i})^(T-Q).

    Names :func:`theory.scb.sde.draw_statistics` as its sampler (the same law, drawn)."""
    from ..noise import Independent, Moments

    st = statistic_symbols(N)
    mus, Pm, rho = _mus(N), transition_matrix(N), _indexed("rho", N, positive=True)[0]
    kappa = st["kappa"]
    tk = Moments._dummies(kappa)
    query = Moments(kappa, sp.Add(*[m * sp.exp(t) for m, t in zip(mus, tk)]), tk, "categorical query")
    rest = (*st["y"], *st["b"], *st["nu"])
    t = Moments._dummies(rest)
    ty, tb, tn = t[:N], t[N:2 * N], t[2 * N:]
    token = [sp.exp(rho * tb[i] + tn[i]) for i in range(N)]
    support = sp.Add(*[mus[i] * token[i] for i in range(N)])
    chosen = sp.Add(*[mus[j] * token[j] * sp.Add(*[Pm[i, j] * sp.exp(ty[i]) for i in range(N)]) for j in range(N)])
    off = sp.Add(*[mus[i] * sp.exp(tn[i]) for i in range(N)])
    mgf = chosen * support ** (1 / rho - 1) * off ** (T - 1 / rho)
    # the query innermost: E over kappa first, on the polynomial g; the moments of the rest last (so
    # no expression holding them is expanded)
    rest_law = Moments(rest, mgf, t, "one sequence's target, support and counts", simplify=False)
    return Independent((rest_law, query),
                       ref="theory.scb.sde:draw_statistics")


@lru_cache(maxsize=None)
def noise_system(N: int, exact: bool = True) -> ReducedSystem:
    """:func:`general_system` (``N`` queries, on the invariant manifold) with its minibatch noise,
    derived from :func:`per_sample_loss` of one sequence (spec §3.6 option A): the per-sample flow
    ``g = -M grad_theta l`` with the flow's own map (:func:`_reduced_preconditioner`), so that
    ``E_x[g]`` is the drift (``theory.noise.check_drift`` at valid tasks; tests).

    Parameters: the general system's plus the transition matrix ``P_i_j`` (the per-sample loss sees
    ``V = zeta P_tilde + omega mu 1^T`` entry by entry). ``K``, ``m2``, ``rho_k`` must be the
    task's (``tr(P Sigma P^T)``, ``|mu|^2``, ``|q_k|^2``): :func:`theory.scb.sde.noise_parameters`.

    The law of the sample statistics (one query ``k ~ mu``; the Q support tokens iid ``mu``, the
    target ``y ~ P[:, x_s]`` with ``s ~ q_k``, the ``T - Q`` other tokens as multinomial counts) is
    exact and in closed form (:func:`statistics_law`: its moment generating function, uniform ``q``,
    Decision 3), so the mean flow ``E_x[g]`` is exact (it equals the drift at valid tasks) and so is
    the covariance; ``g`` is polynomial in the statistics, but its ``Cov_x[g]`` written out is
    millions of operations per entry, so it is left implicit (``noise.covariance is None``,
    ``noise.exact``): :func:`theory.noise.covariance_at` evaluates it exactly at a point. The SDE
    samples the same law (the exact outcome tables, alias draws: :func:`theory.scb.sde.sample_tables`;
    :func:`theory.scb.sde.draw_statistics`, the sampler the law names, from the parameters).

    ``exact=False``: the same system and per-sample flow with the law as its sampler only (a
    :class:`~theory.noise.MonteCarlo` law: no moments derived, seconds less at N = 3 and growing
    with N) — what the reduced SDE compiles (:mod:`theory.scb.sde`)."""
    from ..noise import MonteCarlo, derive_noise

    G = general_system(N)
    st = statistic_symbols(N)
    samples = tuple(s for name in ("kappa", "b", "nu", "y") for s in st[name])
    ell, _, _ = _reduced_sample(N)
    where = ("minibatch SGD (docs/papers/scb.md §3.6 option A): per-sample flow of the squared loss of one sequence "
             "on the invariant manifold; time = optimiser steps. ")
    if exact:
        law = statistics_law(N)
        about = ("The law of the statistics is exact, in closed form (its moment generating function); so are the "
                 "mean and the covariance, which is left implicit (millions of operations per entry written out; "
                 "theory.noise.covariance_at evaluates it)")
    else:
        law = MonteCarlo(samples, ref="theory.scb.sde:draw_statistics",
                         description=r"the statistics' exact law, drawn (theory.scb.derive.statistics_law)")
        about = "The law as its sampler: the SDE draws it per step (the exact law: noise_system(N))"
    noise = derive_noise(ell, G.state, samples, law, preconditioner=_reduced_preconditioner(N), simplify=False,
                         covariance=False, description=where + about)
    noise = dataclasses.replace(noise, per_sample_loss=_canonical(noise.per_sample_loss),
                                gradient=tuple(_canonical(e) for e in noise.gradient))
    P_entries = tuple(transition_matrix(N))
    return ReducedSystem(
        name="minibatch", paper=PAPER, state=G.state, parameters=(*G.parameters, *P_entries), rhs=G.rhs,
        definitions=G.definitions, observables=dict(G.observables), spec=f"{SPEC} §3.3, §3.6 (N={N})",
        description="The general reduced flow with the minibatch noise of SGD derived from the squared loss of "
                    "one sequence (per-sample flow on the invariant manifold; "
                    + ("exact law, mean and covariance)." if exact else "the law's sampler)."),
        noise=noise)


def _canonical(expr: sp.Expr) -> sp.Expr:
    """``expr`` printed and parsed back, as the JSON reader does (:func:`theory.load_system`):
    differentiation leaves products such as ``Mul(-1, 2, x)`` unevaluated, which read back as
    ``-2*x`` — the same expression, another tree; stored in the read-back form, the exported
    system is :meth:`~theory.ReducedSystem.equivalent` to the derived one."""
    return sp.sympify(str(expr), locals={str(s): s for s in expr.free_symbols})


def energy_symbols(N: int) -> tuple[sp.Symbol, ...]:
    """``E_V``, ``E_v``, ``E_a_1..E_a_N``: the off-manifold energies of the reduced SDE (spec §3.6)."""
    return (sp.Symbol("E_V", nonnegative=True), sp.Symbol("E_v", nonnegative=True),
            *_indexed("E_a", N, nonnegative=True))


@lru_cache(maxsize=None)
def closure_system(N: int) -> ReducedSystem:
    """The drift of the reduced SDE (spec §3.6 "Reduced SDE"): :func:`general_system`'s state plus
    the off-manifold energies ``E_V = tr(R Sigma R^T)``, ``E_v = |r_v|^2``, ``E_a_k = |delta_k|^2``
    of the exact decomposition ``V - V mu 1^T = zeta P_tilde + R``, ``V mu = omega mu + r_v``,
    ``a_k = xi_k 1 + beta_k q_k + delta_k`` (theory.scb.sde).

    Derived from the population loss with the energies (:func:`query_loss`): the on-manifold
    coordinates follow the same natural-gradient flow; an off-manifold part ``z`` enters the loss
    only through its energy, so the preconditioned flow moves it as ``z' = -2 p_z (dL/dE) z`` and
    ``E' = -4 p_z E dL/dE`` with ``p_z`` the coordinate's preconditioner (``eta_V`` for ``R`` and
    ``r_v``: ``R Sigma D^-1 = R - R mu 1^T`` and ``Sigma 1 = 0``; ``eta_A / mu_k`` for
    ``delta_k``). At zero energies it is the general system. The SDE adds the energies' Itô terms
    (the minibatch noise leaves the manifold; theory.scb.sde.ReducedMinibatchSDE)."""
    if N < 1:
        raise ConfigError("N", "must be >= 1")
    G = general_system(N)
    xis, betas = G.state[2:2 + N], G.state[2 + N:]
    mus, rhos = _mus(N), _indexed("rho", N, positive=True)
    E_V, E_v, *E_a = energy_symbols(N)
    loss, rhs = _loss_and_flow(N, xis, betas, mus, rhos, (E_V, E_v, E_a))
    theta = (rhs[0], rhs[1], *(rhs[2 + 2 * k] for k in range(N)), *(rhs[3 + 2 * k] for k in range(N)))
    energies = [sp.expand(-4 * eta_V * E_V * sp.diff(loss, E_V)), sp.expand(-4 * eta_V * E_v * sp.diff(loss, E_v))]
    energies += [sp.expand(-4 * eta_A / mus[k] * E_a[k] * sp.diff(loss, E_a[k])) for k in range(N)]
    return ReducedSystem(
        name="closure", paper=PAPER, state=(*G.state, E_V, E_v, *E_a), parameters=G.parameters,
        rhs=(*theta, *energies), spec=f"{SPEC} §3.6 (reduced SDE, N={N})",
        description="Population flow of the reduced coordinates and the off-manifold energies (the reduced SDE's "
                    "drift before the Ito terms of the energies).")


@lru_cache(maxsize=None)
def off_manifold_norms(N: int) -> tuple[sp.Expr, ...]:
    """Squared norms of the off-manifold parts of one sample's full per-sample flow at the
    on-manifold point (``off_R``, ``off_v``, ``off_a_1..N``; the energies' metrics), in the
    symbols of :func:`noise_system`. From :func:`per_sample_loss` with a full matrix ``W`` and
    histogram ``h``: the full flow is ``G_V = -eta_V grad_W l D^-1`` and, for the query's
    attention, ``G_a = -(eta_A/mu_k) X^T grad_h l`` (``h = X a``), so ``|G_a|^2 = (eta_A/mu_k)^2
    sum_i nu_i (dl/dh_i)^2`` (``X X^T = diag(nu)``); the manifold parts are the projected flow
    ``g`` of :func:`noise_system` (orthogonal decompositions: ``tr(G Sigma G^T) = K g_zeta^2 +
    |G_R|^2_Sigma``, ``|G_V mu|^2 = m2 g_omega^2 + |G_r_v|^2``, ``|G_a|^2 = (g_xi, g_beta) G_k
    (g_xi, g_beta)^T + |G_delta|^2``). Their mean over samples is the energies' Itô rate."""
    S = noise_system(N, exact=False)
    g = S.noise.gradient
    st = statistic_symbols(N)
    mus, rhos = _mus(N), _indexed("rho", N, positive=True)
    _, h, V = _reduced_sample(N)
    W = sp.Matrix(N, N, lambda i, j: sp.Dummy(f"W{i}{j}"))
    hh = sp.Matrix(N, 1, lambda i, j: sp.Dummy(f"h{i}"))
    ell = per_sample_loss(W, hh, st["y"])
    at = {**{W[i, j]: V[i, j] for i in range(N) for j in range(N)}, **{hh[i]: h[i] for i in range(N)}}
    GV = sp.Matrix(N, N, lambda i, j: -eta_V * sp.diff(ell, W[i, j]) / mus[j]).xreplace(at)
    Gh = [sp.diff(ell, hh[i]).xreplace(at) for i in range(N)]
    mu = sp.Matrix(mus)
    Sig = sp.diag(*mus) - mu * mu.T
    off_R = (GV * Sig * GV.T).trace() - K * g[0] ** 2
    v = GV * mu
    off_v = (v.T * v)[0, 0] - m2 * g[1] ** 2
    a_sq = sum(st["kappa"][k] * (eta_A / mus[k]) ** 2 for k in range(N)) * sum(
        st["nu"][i] * Gh[i] ** 2 for i in range(N))
    off_a = [st["kappa"][k] * a_sq - (T * g[2 + k] ** 2 + 2 * g[2 + k] * g[2 + N + k] + rhos[k] * g[2 + N + k] ** 2)
             for k in range(N)]
    return (off_R, off_v, *off_a)


# -- the full (V, A) system (spec §3.2, §3.6 option A) ----------------------------------------------
def full_symbols(N: int, T_: int) -> dict[str, Any]:
    """Symbols of the full parameters: ``V`` (N, N) entries ``V_i_j``, ``A`` (T, N) entries
    ``A_t_k`` (column k = a^(k)), the targets ``q_t_k``, and one sequence: ``x_t_i`` (token i at
    position t, one-hot per t), ``kappa_i`` (query), ``y_i`` (target)."""
    return {
        "V": sp.Matrix(N, N, lambda i, j: sp.Symbol(f"V_{i + 1}_{j + 1}", real=True)),
        "A": sp.Matrix(T_, N, lambda t, k: sp.Symbol(f"A_{t + 1}_{k + 1}", real=True)),
        "q": sp.Matrix(T_, N, lambda t, k: sp.Symbol(f"q_{t + 1}_{k + 1}", nonnegative=True)),
        "x": sp.Matrix(T_, N, lambda t, i: sp.Symbol(f"x_{t + 1}_{i + 1}", real=True)),
        "kappa": _indexed("kappa", N, real=True),
        "y": _indexed("y", N, real=True),
    }


@lru_cache(maxsize=None)
def full_system(N: int, T_: int) -> ReducedSystem:
    """The preconditioned population flow of the full parameters ``(V, A)`` (state ``V_i_j`` then
    ``A_t_k``, row-major), ``V' = -eta_V grad_V L D^-1``, ``a_k' = -(eta_A/mu_k) grad_{a_k} L``
    (spec §3.3), with ``L`` the expectation of :func:`per_sample_loss` by the moment identity
    (spec §3.1: ``E[X a b^T X^T] = <a,b> Sigma + (1^T a)(1^T b) mu mu^T``, ``E[y|X,k] = P X q_k``),
    and its minibatch noise from the same per-sample loss of one sequence (``h = X A kappa``).
    The sequence has ``N^(T+1)`` contexts and queries: Monte Carlo (``noise.covariance is None``),
    drawn by :func:`theory.scb.sde.draw_sequences` (the SDE: theory.scb.sde.FullMinibatchSDE;
    its compiled step draws the same law from alias tables, theory.scb.sde_numba)."""
    from ..noise import MonteCarlo, derive_noise

    if N < 2 or T_ < 1:
        raise ConfigError("N", f"the full system needs N >= 2 and T >= 1, got N={N}, T={T_}")
    s = full_symbols(N, T_)
    V, A, Qm = s["V"], s["A"], s["q"]
    mus = _mus(N)
    mu = sp.Matrix(mus)
    Pm = transition_matrix(N)
    Sig = sp.diag(*mus) - mu * mu.T
    ones = sp.ones(T_, 1)

    def second(a, b, W1, W2):  # tr(W1 E[X a b^T X^T] W2^T), the moment identity
        return (a.T * b)[0, 0] * (W1 * Sig * W2.T).trace() + (ones.T * a)[0, 0] * (ones.T * b)[0, 0] * (
            (W2 * mu).T * (W1 * mu))[0, 0]

    loss = sp.S.Zero
    for k in range(N):
        a, q = A[:, k], Qm[:, k]
        loss += mus[k] * (sp.Rational(1, 2) - second(a, q, V, Pm) + second(a, a, V, V) / 2)
    rhs = [-eta_V * sp.diff(loss, V[i, j]) / mus[j] for i in range(N) for j in range(N)]
    rhs += [-eta_A * sp.diff(loss, A[t, k]) / mus[k] for t in range(T_) for k in range(N)]
    state = (*V, *A)
    h = s["x"].T * A * sp.Matrix(s["kappa"])
    ell = per_sample_loss(V, h, s["y"])
    samples = (*s["x"], *s["kappa"], *s["y"])
    law = MonteCarlo(samples, ref=f"theory.scb.sde:draw_sequences_{N}x{T_}",
                     description=(r"one sequence: query $\kappa \sim \mu$, context tokens iid $\mu$, target "
                                  r"$y \sim P_{:, x_s}$, $s \sim q_\kappa$ (docs/papers/scb.md §1.2, Decision 1 A)"))
    pre = [eta_V / mus[j] for i in range(N) for j in range(N)] + [eta_A / mus[k] for t in range(T_) for k in range(N)]
    noise = derive_noise(ell, state, samples, law, preconditioner=pre, simplify=False,
                         description=("minibatch SGD on $(V, A)$ (docs/papers/scb.md §3.6 option A); "
                                      "time = optimiser steps"))
    return ReducedSystem(
        name="full", paper=PAPER, state=state, parameters=(eta_V, eta_A, *mus, *Pm, *Qm), rhs=tuple(rhs),
        observables={"population_loss": loss}, spec=f"{SPEC} §3.2-3.3, §3.6 option A (N={N}, T={T_})",
        description="Preconditioned population flow of the full parameters $(V, A)$ with the minibatch noise of one "
                    "sequence's squared loss.", noise=noise)
