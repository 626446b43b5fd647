"""Closed forms and the paper's reduced ODEs (docs/papers/scan_snap.md §3.1-§3.5).

* :func:`closed_forms` — ``h`` (Eqn. 44-45, Lambert W), ``gamma`` (Eqn. 85), ``Gamma`` (Eqn. 128),
  ``z_ct`` (Eqn. 122), ``xi`` (Eqn. 123), ``B`` (Eqn. 124/129), Theorem 4's branches and times;
  numpy versions :func:`h_closed_form`, :func:`gamma_of_t`, :func:`Gamma_of_t`, :func:`B_of_t` ...
* :func:`reduced_system` — the reduced attention ODE (Lemma 4 / Eqn. 10, compact form) on the
  symmetric subspace, with ``gamma(t)`` exogenous through ``h`` (a state), ``P(l|n)`` symbolic;
* :func:`snap_system` — Theorem 4's 1-D snap ODE (Eqn. 13) with its closed forms.

Time: per-sample time ``t``; ``h`` is evaluated at ``t/K`` (Decision 2).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import sympy as sp

from ..core import ReducedSystem, compile_expressions
from .config import PAPER, SPEC, ScanSnapConfig, make_task
from .derive import C_sym, K_sym, entropy_expr, eta_Y, eta_Z

__all__ = ["closed_forms", "h_closed_form", "h_discrete", "gamma_of_t", "Gamma_of_t", "B_of_t", "B_theorem4",
           "transition_times", "chi_bounds", "snap_system", "reduced_system", "reduced_parameters",
           "snap_parameters", "t_sym", "M_sym", "C0_sym", "h_sym"]

t_sym = sp.Symbol("t", real=True)
M_sym, C0_sym = sp.symbols("M C_0", positive=True)
h_sym = sp.Symbol("h", real=True)


@lru_cache(maxsize=1)
def closed_forms() -> dict[str, sp.Expr]:
    """Symbolic closed forms in per-sample time ``t`` (h evaluated at ``t/K``), spec §3.1/§3.5.

    ``h_lambert`` solves Eqn. 44 (Eqn. 45 made explicit with Lambert W); ``gamma`` Eqn. 85;
    ``Gamma`` Eqn. 128 (a function of ``h``); ``z_ct`` Eqn. 122; ``xi`` Eqn. 123; ``B`` Eqn. 124
    with ``B(0) = 0`` (Decision 5) and ``B_paper`` without; branches of Theorem 4; ``t0_prime``,
    ``t0`` (without the ``1 + omega_1`` factor)."""
    s = sp.Symbol("s", nonnegative=True)  # per-class time t/K
    A = M_sym * eta_Y * s + 1
    h_lambert = (A / (M_sym - 1) - sp.LambertW(sp.exp(A / (M_sym - 1)) / (M_sym - 1))) / M_sym
    gamma_h = (M_sym - 1) ** 2 * h_sym / ((M_sym - 1) + sp.exp(M_sym * h_sym))
    Gamma_h = eta_Z / eta_Y * K_sym * (M_sym - 1) ** 2 * h_sym**2 / 2
    B = sp.Rational(1, 4) * sp.log((C0_sym + 4 * Gamma_h) / C0_sym)
    nu = eta_Y / eta_Z
    early = sp.Rational(1, 4) * sp.log(C0_sym + 2 * (M_sym - 1) ** 2 / (K_sym * M_sym**2) * eta_Y * eta_Z * t_sym**2)
    late = sp.Rational(1, 4) * sp.log(C0_sym + 2 * K_sym * (M_sym - 1) ** 2 / M_sym**2 / nu
                                      * sp.log(M_sym * eta_Y * t_sym / K_sym) ** 2)
    return {
        "s": s,
        "h_lambert": h_lambert,  # function of s = t/K
        "h_invariant": sp.exp(M_sym * h_sym) + (M_sym - 1) * M_sym * h_sym,  # = M eta_Y s + 1 (Eqn. 45)
        "h_rate": eta_Y / ((M_sym - 1) + sp.exp(M_sym * h_sym)),  # Eqn. 44, dh/ds
        "gamma": gamma_h,
        "Gamma": Gamma_h,
        "z_ct": -sp.Rational(1, 4) * sp.log(1 + 4 * Gamma_h / C0_sym),
        "xi": gamma_h / (C0_sym + 4 * Gamma_h),
        "B": B,
        "B_paper": sp.Rational(1, 4) * sp.log(C0_sym + 4 * Gamma_h),
        "B_early": early,
        "B_late": late,
        "t0_prime": K_sym * sp.log(M_sym) / eta_Y,
        "t0": 2 * K_sym * sp.log(M_sym) / eta_Y,
    }


def h_closed_form(s, M: float, eta_Y_: float) -> np.ndarray:
    """``h(s)`` of Eqn. 45 (s = per-class time), by Lambert W for moderate arguments and by Newton on
    ``e^{Mh} + (M-1)Mh = M eta_Y s + 1`` (overflow-safe) otherwise."""
    from scipy.special import lambertw

    s = np.asarray(s, dtype=np.float64)
    A = M * eta_Y_ * s + 1.0
    u = A / (M - 1)
    with np.errstate(over="ignore"):
        x = np.exp(u) / (M - 1)
        hw = (u - np.real(lambertw(x))) / M
    bad = ~np.isfinite(hw) | (u > 600)
    if np.any(bad):  # Newton in y = Mh on e^y + (M-1) y = A
        Ab = np.broadcast_to(A, s.shape)[bad]
        y = np.log(Ab)  # e^y ~ A dominates for large A
        for _ in range(60):
            g = np.exp(y) + (M - 1) * y - Ab
            y = y - g / (np.exp(y) + (M - 1))
        hw = np.array(hw, dtype=np.float64)
        hw[bad] = y / M
    return hw


def h_discrete(steps: int, M: float, eta_Y_: float) -> np.ndarray:
    """``h*(s)`` for s = 0..steps (Eqn. 33, Lemma 5)."""
    h = np.zeros(steps + 1)
    for i in range(1, steps + 1):
        h[i] = h[i - 1] + eta_Y_ / ((M - 1) + np.exp(M * h[i - 1]))
    return h


def gamma_of_t(t, M, K, eta_Y_):
    """Eqn. 85 with ``h(t/K)``."""
    h = h_closed_form(np.asarray(t, float) / K, M, eta_Y_)
    return (M - 1) ** 2 * h / ((M - 1) + np.exp(M * h))


def Gamma_of_t(t, M, K, eta_Y_, eta_Z_):
    """Eqn. 128: ``Gamma(t) = eta_Z/eta_Y K (M-1)^2 h(t/K)^2 / 2``."""
    h = h_closed_form(np.asarray(t, float) / K, M, eta_Y_)
    return eta_Z_ / eta_Y_ * K * (M - 1) ** 2 * h**2 / 2


def B_of_t(t, M, K, eta_Y_, eta_Z_, C0=1.0, paper_offset=False):
    """Eqn. 124/129; ``B(0) = 0`` form (Decision 5) unless ``paper_offset``."""
    G = Gamma_of_t(t, M, K, eta_Y_, eta_Z_)
    return 0.25 * np.log(C0 + 4 * G) if paper_offset else 0.25 * np.log((C0 + 4 * G) / C0)


def B_theorem4(t, M, K, eta_Y_, eta_Z_, C0=1.0):
    """The two branches of Theorem 4 (Eqn. 14), each evaluated everywhere: ``(early, late)``."""
    f = closed_forms()
    subs = {M_sym: M, K_sym: K, eta_Y: eta_Y_, eta_Z: eta_Z_, C0_sym: C0}
    e = compile_expressions(t_sym, f["B_early"].subs(subs))
    lt = compile_expressions(t_sym, f["B_late"].subs(subs))
    t = np.asarray(t, float)
    with np.errstate(all="ignore"):
        return np.asarray(e(t), float) * np.ones_like(t), np.asarray(lt(t), float) * np.ones_like(t)


def transition_times(M, K, eta_Y_) -> tuple[float, float]:
    """``(t0', t0)`` = ``(K ln M/eta_Y, 2 K ln M/eta_Y)`` (Theorem 4, without 1 + omega_1)."""
    return K * math.log(M) / eta_Y_, 2 * K * math.log(M) / eta_Y_


def chi_bounds(t, M, K, eta_Y_, eta_Z_, f0sq, C0=1.0):
    """Eqn. 12: ``(exp(2 f0^2 B), exp(2 B))``."""
    B = B_of_t(t, M, K, eta_Y_, eta_Z_, C0)
    return np.exp(2 * f0sq * B), np.exp(2 * B)


@lru_cache(maxsize=1)
def snap_system() -> ReducedSystem:
    """Theorem 4 as an ODE in per-sample time: ``dh/dt = eta_Y/(K((M-1) + e^{Mh}))`` (Eqn. 44 at
    t/K), ``dz_ct/dt = -eta_Z gamma e^{4 z_ct}/C_0`` (Eqn. 13), ``dGamma/dt = eta_Z gamma``,
    ``dB/dt = eta_Z xi`` with ``xi = gamma e^{4 z_ct}/C_0`` (Eqn. 13/123)."""
    f = closed_forms()
    zc, G, B = sp.symbols("z_ct Gamma B", real=True)
    gam, xi = sp.Symbol("gamma", real=True), sp.Symbol("xi", real=True)
    defs = ((gam, f["gamma"]), (xi, gam * sp.exp(4 * zc) / C0_sym))  # Eqn. 85, Eqn. 13
    rhs = (f["h_rate"] / K_sym, -eta_Z * gam * sp.exp(4 * zc) / C0_sym, eta_Z * gam, eta_Z * xi)
    return ReducedSystem(
        name="snap", paper=PAPER, state=(h_sym, zc, G, B), parameters=(M_sym, K_sym, eta_Y, eta_Z, C0_sym),
        rhs=rhs, definitions=defs, observables={"gamma": gam, "xi": xi},
        closed_forms={k: f[k] for k in ("Gamma", "z_ct", "B", "xi")},
        spec=f"{SPEC} §3.5 (Theorem 4, 1-D snap ODE)",
        description=r"Single common token with the same $C_0$ in $z$ and $\xi$; $h$ carries $\gamma(t)$.",
    )


def snap_parameters(config: ScanSnapConfig) -> dict[str, float]:
    return {"M": float(config.M_theory), "K": float(config.K), "eta_Y": float(config.eta_Y),
            "eta_Z": float(config.eta_Z), "C_0": float(config.C0)}


@lru_cache(maxsize=16)
def _reduced_system(U: int, has_common: bool, per_query: int, uniform: bool, remark1: bool = False) -> ReducedSystem:
    f = closed_forms()
    r = lambda n: sp.Symbol(n, real=True)  # noqa: E731
    zdt = [r(f"z_dt_{j}") for j in range(U)]
    zc, B = r("z_c"), r("B")
    P_dt = sp.symbols(f"P_dt_0:{U}", positive=True)
    P_c = sp.Symbol("P_c", positive=True)
    c_dt, f_dt = [r(f"c_dt_{j}") for j in range(U)], [r(f"f_dt_{j}") for j in range(U)]
    c_c, f_c, cnorm = r("c_c"), r("f_c"), sp.Symbol("cnorm", positive=True)
    gam, E, Gnn, Gcol, xi = (r(n) for n in ("gamma", "E", "Ginv_nn", "Ginv_colsum", "xi"))
    # symmetric subspace (as full_system): every class has the same f profile; F^T F = I + E (11^T - I)
    defs = [(gam, f["gamma"])]  # Eqn. 85, gamma(t) from h(t/K)
    defs += [(c_dt[j], P_dt[j] * sp.exp(zdt[j])) for j in range(U)]  # Eqn. 5
    if has_common:
        defs.append((c_c, P_c * sp.exp(zc)))
    defs.append((cnorm, sp.sqrt(sum(v**2 for v in c_dt) + (C_sym * c_c**2 if has_common else 0))))
    defs += [(f_dt[j], c_dt[j] / cnorm) for j in range(U)]
    if has_common:
        defs += [(f_c, c_c / cnorm), (E, C_sym * f_c**2)]  # E_{nn'} = f_n^T f_n' (common tokens only)
        defs += [(Gnn, (1 - E / (1 + (K_sym - 1) * E)) / (1 - E)),  # [(F^T F)^{-1}]_{nn}
                 (Gcol, 1 / (1 + (K_sym - 1) * E))]  # sum_n' [(F^T F)^{-1}]_{n'n}
    else:
        defs += [(Gnn, sp.Integer(1))]
    defs.append((xi, gam * (Gnn - 1)))  # Eqn. 12 leading order, the same for every class
    weight = 1 / K_sym if uniform else 1
    # Eqn. 10 compact: z_m += eta_Z gamma sum_{n in psi^-1(m)} f_n o (F G^-1 e_n - f_n); on DTs that is
    # eta_Z f_l^2 xi_n (Eqn. 98); on a common token sum over the per_query classes of that query
    rhs_dt = [eta_Z * weight * f_dt[j] ** 2 * xi for j in range(U)]
    rhs_c = eta_Z * weight * per_query * gam * f_c**2 * (Gcol - 1)
    state = (h_sym, *zdt, *((zc,) if has_common else ()), B)
    # Remark 1: under the original (not decoupled) Y-dynamics the decoder's logit gap grows at the
    # effective rate (1 - rho) eta_Y, rho = f_n^T f_n' = E (quasi-static f, Assumption 1(c))
    h_rate = f["h_rate"] * ((1 - E) if (remark1 and has_common) else 1)
    rhs = (h_rate / K_sym, *rhs_dt, *((rhs_c,) if has_common else ()), eta_Z * weight * xi)
    params = (M_sym, K_sym, eta_Y, eta_Z, *((C_sym, P_c) if has_common else ()), *P_dt)
    return ReducedSystem(
        name="reduced_remark1" if (remark1 and has_common) else "reduced", paper=PAPER, state=state,
        parameters=params, rhs=rhs, definitions=tuple(defs),
        observables={"dt_entropy": entropy_expr(c_dt), "gamma": gam, "xi": xi},
        spec=f"{SPEC} §3.2 (Lemma 4 / Eqn. 10 compact form, gamma from h(t/K)"
             + ("; h at Remark 1's effective rate (1 - E) eta_Y)" if remark1 and has_common else ")"),
        description=(r"Reduced attention ODE with exogenous $\gamma(t)$ on the symmetric subspace of the "
                     r"official generator; $B = \eta_Z \int \xi\, dt$ (per class, Decision 2 weights). "
                     r"$E$ is the overlap $f_n^\top f_{n'}$ of two classes (Assumption 2)."),
    )


def reduced_system(config: ScanSnapConfig, *, remark1: bool = False) -> ReducedSystem:
    """Lemma 4 / Eqn. 10 (compact form) for ``config``'s layout; parameters :func:`reduced_parameters`.
    ``remark1``: ``h`` grows at Remark 1's effective rate ``(1 - E) eta_Y`` (the original
    Y-dynamics, which training follows; ``E = f_n^T f_n'`` the current overlap) instead of Lemma
    3's decoupled ``eta_Y``."""
    return _reduced_system(config.num_unique_per_next, config.num_common > 0, config.num_next_per_last,
                           config.class_weights == "uniform", remark1)


def reduced_parameters(config: ScanSnapConfig) -> dict[str, float]:
    task = make_task(config)
    out = {"M": float(config.M_theory), "K": float(config.K), "eta_Y": float(config.eta_Y),
           "eta_Z": float(config.eta_Z), "C": float(config.num_common)}
    if config.num_common:
        out["P_c"] = float(task.P[0, task.common[0]])
    out.update({f"P_dt_{j}": float(task.P[0, l]) for j, l in enumerate(task.dt[0])})
    return out
