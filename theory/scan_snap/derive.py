"""Derivation of the Scan & Snap flows from the loss (spec §2.5, Appendix A).

Nothing here is typed from the paper's printed flow: the ``T = inf`` population objective
``J_inf(Y, Z)`` is written down (spec §2.5, Eqn. 5) and differentiated.

* :func:`population_objective` — ``J_inf`` on sympy or numbers;
* :func:`chain_rule_flow` — gradient ascent through the paper's *named intermediate quantities*
  (``c~``, ``|c~|``, ``f``, the logits ``w`` and the softmax normaliser ``S``): reverse-mode
  differentiation whose adjoints are named too (``fbar`` = dJ/df is the paper's back-propagated
  gradient ``g_n = Y(e_n - alpha_n)``), so the exported system reads like the paper and stays small;
* :func:`full_system` — the ``T = inf`` coupled flow on the exact symmetric subspace of the official
  generator from zero init, with ``P(l|n)``, ``K``, ``C`` ... as symbolic parameters;
* :func:`general_system` — the same flow with no symmetry assumed (numeric ``P``; tests only);
* :func:`minimal_instance` — spec Appendix A's symbolic instance (checks 1-7 in the tests);
* :func:`embed_symmetric_state`, :func:`general_state_vector`, :func:`unpack_general_state`,
  :func:`z_rows` — maps between these systems' states and the full parameters ``Y``, ``Z``.

Time: per-sample time, class weights ``pi_n = 1/K`` (see :class:`ScanSnapConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from ..core import ReducedSystem
from .config import PAPER, SPEC, ScanSnapConfig, ScanSnapTask, make_task

__all__ = ["population_objective", "gradient_ascent_flow", "chain_rule_flow", "full_system", "general_system",
           "full_parameters", "minimal_instance", "SymmetricLayout", "symmetric_layout", "entropy_expr",
           "eta_Y", "eta_Z", "R_sym", "K_sym", "C_sym", "Nq_sym", "embed_symmetric_state", "general_state_vector",
           "unpack_general_state", "z_rows", "z_state_names", "T_sym", "sample_symbols", "per_sample_loss",
           "per_sample_system"]

eta_Y, eta_Z = sp.symbols("eta_Y eta_Z", positive=True)
R_sym = sp.Symbol("R", positive=True)  # number of non-label output tokens, M_out - K
K_sym = sp.Symbol("K", positive=True)  # number of classes
C_sym = sp.Symbol("C", positive=True)  # number of common tokens
Nq_sym = sp.Symbol("N_q", positive=True)  # number of query tokens (num_last)


# ------------------------------------------------------------------------------------------------
# The objective and its gradient-ascent flow (spec §2.5)
# ------------------------------------------------------------------------------------------------
def population_objective(P_rows, z_rows, Y_cols, query_index, label_cols, other_mult=None, pi=None):
    """``J_inf = sum_n pi_n [w_n[n] - log sum_k e^{w_n[k]}]`` with ``w_n = Y^T f_n``,
    ``f_n = c~_n/|c~_n|``, ``c~_n = P(.|n) o exp(z_psi(n))`` (spec §2.5, Eqn. 5).

    Works on sympy or numbers. ``P_rows[n]``: dict token -> P(l|n) (support only);
    ``z_rows[m]``: dict token -> logit; ``Y_cols[k]``: dict token -> Y[l, k] for each output
    coordinate k; ``label_cols[n]``: the k of class n's label; ``other_mult[k]``: multiplicity of
    output coordinate k in the softmax (1 for labels, R for the shared non-label column).
    Returns ``(J, f)`` with ``f[n]`` the dict of f_n.
    """
    K = len(P_rows)
    pi = pi or [sp.Rational(1, K)] * K
    mult = other_mult or [1] * len(Y_cols)
    J, fs = 0, []
    for n in range(K):
        z = z_rows[query_index[n]]
        c = {l: p * sp.exp(z[l]) for l, p in P_rows[n].items()}  # Eqn. 5 (un-normalised score)
        norm = sp.sqrt(sum(v**2 for v in c.values()))
        f = {l: v / norm for l, v in c.items()}  # f_n = c_n/|c_n|_2 = LN(X^T b) at T = inf
        w = [sum(col.get(l, 0) * f[l] for l in f) for col in Y_cols]  # logits Y^T f_n
        lse = sp.log(sum(mk * sp.exp(wk) for mk, wk in zip(mult, w)))
        J += pi[n] * (w[label_cols[n]] - lse)
        fs.append(f)
    return J, fs


def gradient_ascent_flow(objective: sp.Expr, blocks) -> list[sp.Expr]:
    """``d(coords)/dt = rate / weight * dJ/d(coords)`` per block ``(coords, weight, rate)``: gradient
    ascent with the Euclidean metric of the full parameters pulled back to coordinates that stand
    for ``weight`` identical entries. No expansion (expressions keep their exp/sqrt structure)."""
    out = []
    for coords, weight, rate in blocks:
        out.extend(rate / weight * sp.diff(objective, c) for c in coords)
    return out


def _bar(sym: sp.Symbol) -> sp.Symbol:
    """Adjoint symbol: ``f_dt_0`` -> ``fbar_dt_0`` (LaTeX ``\\bar{f}_{dt 0}``)."""
    head, _, tail = str(sym).partition("_")
    return sp.Symbol(f"{head}bar" + (f"_{tail}" if tail else ""), real=True)


def chain_rule_flow(forward, objective, coords, weights, rates):
    """Gradient ascent on ``objective`` through named intermediates, by reverse-mode chain rule.

    ``forward``: ordered ``[(symbol, expr), ...]``, each expr in the coordinates, parameters and
    earlier symbols; ``objective``: J in the same. Returns ``(definitions, rhs)``: the forward
    definitions followed by the non-zero adjoints ``dbar = dJ/dd`` (total derivative through every
    later quantity), and ``rhs[i] = rates[i] / weights[i] * dJ/dcoords[i]``. Expanding the
    definitions gives exactly ``gradient_ascent_flow`` of the expanded objective (tested)."""
    fwd_syms = [s for s, _ in forward]
    back = {e: s for s, e in forward}
    # products and powers re-named inside larger products (P e^z -> c~) and 1/sqrt(.) -> 1/|c~|
    algebraic = [(e, s) for s, e in forward if e.is_Pow or e.is_Mul]

    def named(expr):
        return expr.xreplace(back).subs(algebraic)

    adj: dict[sp.Symbol, sp.Symbol] = {}
    adj_defs = []
    for i in reversed(range(len(forward))):
        s = forward[i][0]
        expr = sp.diff(objective, s) + sum(adj[t] * sp.diff(e, s) for t, e in forward[i + 1:] if t in adj)
        expr = named(expr)
        if expr == 0:
            continue
        adj[s] = _bar(s)
        adj_defs.append((adj[s], expr))
    rhs = []
    for x, w, r in zip(coords, weights, rates):
        g = sp.diff(objective, x) + sum(adj[s] * sp.diff(e, x) for s, e in forward if s in adj)
        rhs.append(r / w * named(g))
    assert set(fwd_syms).isdisjoint(coords)
    return list(forward) + adj_defs, rhs


def entropy_expr(weights: list[sp.Expr], mult: list[Any] | None = None) -> sp.Expr:
    """Entropy of the normalised ``weights`` (each counted ``mult`` times)."""
    mult = mult or [1] * len(weights)
    s = sum(m * w for m, w in zip(mult, weights))
    return -sum(m * w / s * sp.log(w / s) for m, w in zip(mult, weights))


# ------------------------------------------------------------------------------------------------
# The full T = inf flow on the symmetric subspace (spec §2.5), parameters symbolic
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SymmetricLayout:
    """Coordinates of the symmetric subspace of the official generator (spec §1.4): every class
    has the same P profile (C common tokens, U distinct tokens), so from ``Y(0) = Z(0) = 0`` the
    T = inf flow keeps (exactly) one value per group of entries:

    ``Y_own_j``  Y[dt_j(n), label n]        (K entries)      ``z_dt_j``  z[psi(n), dt_j(n)]  (K)
    ``Y_xlab_j`` Y[dt_j(n), label n'], n'!=n (K(K-1))        ``z_c``     z[m, c]              (N_q C)
    ``Y_o_j``    Y[dt_j(n), non-label]       (K R)
    ``Y_c_lab``  Y[c, label n]               (C K)           ``Y_c_o``   Y[c, non-label]      (C R)
    The ``weights`` are these group sizes (the pulled-back metric of the flow)."""

    names: tuple[str, ...]
    symbols: tuple[sp.Symbol, ...]
    weights: tuple[Any, ...]
    rates: tuple[sp.Symbol, ...]


def symmetric_layout(U: int, has_common: bool, has_cross: bool) -> SymmetricLayout:
    K, C, R = K_sym, C_sym, R_sym
    names, weights, rates = [], [], []

    def add(name, w, rate):
        names.append(name); weights.append(w); rates.append(rate)

    for j in range(U):
        add(f"Y_own_{j}", K, eta_Y)
        if has_cross:
            add(f"Y_xlab_{j}", K * (K - 1), eta_Y)
        add(f"Y_o_{j}", K * R, eta_Y)
    if has_common:
        add("Y_c_lab", C * K, eta_Y)
        add("Y_c_o", C * R, eta_Y)
    for j in range(U):
        add(f"z_dt_{j}", K, eta_Z)
    if has_common:
        add("z_c", Nq_sym * C, eta_Z)
    syms = tuple(sp.Symbol(n, real=True) for n in names)
    return SymmetricLayout(tuple(names), syms, tuple(weights), tuple(rates))


def _layout_of(config: ScanSnapConfig) -> tuple[int, bool, bool]:
    return config.num_unique_per_next, config.num_common > 0, config.K > 1


#: the sequence length (spec §1.3): the count vectors' law; a parameter of the noise only
T_sym = sp.Symbol("T", positive=True, integer=True)


def sample_symbols(U: int, has_common: bool) -> tuple[sp.Symbol, ...]:
    """The sample of one sequence on the symmetric subspace (spec §1.3): the frequencies ``q_dt_j``
    of the class's distinct tokens and, when there are common tokens, the first two power sums
    ``q_c1 = sum_c q_c``, ``q_c2 = sum_c q_c^2`` of the common tokens' frequencies (the common
    tokens share ``z_c`` and the ``Y_c_*`` rows, so a sequence enters the loss through these alone).
    ``q_l = (count of l among the T - 1 contextual tokens) / (T - 1)``."""
    qs = sp.symbols(f"q_dt_0:{U}", nonnegative=True)
    return tuple(qs) + (tuple(sp.symbols("q_c1 q_c2", nonnegative=True)) if has_common else ())


def _class_objective(s: dict, U: int, has_cross: bool, dt_weights, common):
    """``(forward definitions, J_n)`` of one class on the symmetric subspace, for context weights
    ``dt_weights[j]`` on DT ``j`` and ``common = (u, m1, m2)`` (None without common tokens): each
    common token scores ``c_c = u e^{z_c}``, the norm takes ``m2 c_c^2`` and the logits ``m1 Y_c f_c``.
    The population (``T = inf``, Eqn. 5): ``dt_weights = P_dt``, ``common = (P_c, C, C)``; one
    sequence (spec §1.3): ``dt_weights = q_dt``, ``common = (1, q_c1, q_c2)`` — the same expression
    with the sample in place of ``P``, so ``J_inf`` is the per-sample objective at ``q = P``."""
    r = lambda n: sp.Symbol(n, real=True)  # noqa: E731
    c_dt = [r(f"c_dt_{j}") for j in range(U)]
    f_dt = [r(f"f_dt_{j}") for j in range(U)]
    c_c, f_c, cnorm = r("c_c"), r("f_c"), sp.Symbol("cnorm", positive=True)
    w_own, w_x, w_o, S = r("w_own"), r("w_xlab"), r("w_o"), sp.Symbol("S", positive=True)
    # the paper's named quantities for a class n (all classes are alike on the subspace; J = J_n):
    fwd = [(c_dt[j], dt_weights[j] * sp.exp(s[f"z_dt_{j}"])) for j in range(U)]  # c~_{l|n} (Eqn. 5)
    if common is not None:
        u, m1, m2 = common
        fwd.append((c_c, u * sp.exp(s["z_c"])))
    fwd.append((cnorm, sp.sqrt((m2 * c_c**2 if common is not None else 0) + sum(v**2 for v in c_dt))))  # |c~_n|
    fwd += [(f_dt[j], c_dt[j] / cnorm) for j in range(U)]  # f_n = c~_n/|c~_n|
    if common is not None:
        fwd.append((f_c, c_c / cnorm))

    def logit(dt_name, c_name):  # w_n[k] = (Y^T f_n)[k]
        return sum(s[f"{dt_name}_{j}"] * f_dt[j] for j in range(U)) + (m1 * s[c_name] * f_c if common is not None else 0)

    fwd.append((w_own, logit("Y_own", "Y_c_lab")))  # own label
    if has_cross:
        fwd.append((w_x, logit("Y_xlab", "Y_c_lab")))  # each other label (K - 1 of them)
    fwd.append((w_o, logit("Y_o", "Y_c_o")))  # each non-label output (R of them)
    fwd.append((S, sp.exp(w_own) + ((K_sym - 1) * sp.exp(w_x) if has_cross else 0) + R_sym * sp.exp(w_o)))
    return fwd, w_own - sp.log(S)  # J_n = log alpha_n[n]


def _symmetric_parameters(U: int, has_common: bool) -> tuple[sp.Symbol, ...]:
    P_dt = sp.symbols(f"P_dt_0:{U}", positive=True)
    common = (C_sym, Nq_sym, sp.Symbol("P_c", positive=True)) if has_common else ()
    return (eta_Y, eta_Z, R_sym, K_sym, T_sym, *common, *P_dt)


@lru_cache(maxsize=16)
def _symmetric_system(U: int, has_common: bool, has_cross: bool, noise: bool = False) -> ReducedSystem:
    lay = symmetric_layout(U, has_common, has_cross)
    s = dict(zip(lay.names, lay.symbols))
    params = _symmetric_parameters(U, has_common)
    P_dt = params[-U:]
    common = (sp.Symbol("P_c", positive=True), C_sym, C_sym) if has_common else None
    fwd, J = _class_objective(s, U, has_cross, P_dt, common)
    definitions, rhs = chain_rule_flow(fwd, J, lay.symbols, lay.weights, lay.rates)
    named = {str(k): k for k, _ in fwd}
    c_dt = [named[f"c_dt_{j}"] for j in range(U)]
    c_c, S, w_own = named.get("c_c"), named["S"], named["w_own"]
    dt_ent = entropy_expr(c_dt)
    sup_ent = entropy_expr(c_dt + ([c_c] if has_common else []), [1] * U + ([C_sym] if has_common else []))
    obs = {"dt_entropy": dt_ent, "support_entropy": sup_ent, "population_loss": sp.log(S) - w_own,
           "correct_prob": sp.exp(w_own) / S}
    if has_common:
        obs["ct_logit"] = s["z_c"]
    return ReducedSystem(
        name="full", paper=PAPER, state=lay.symbols, parameters=params, rhs=tuple(rhs),
        definitions=tuple(definitions), observables=obs,
        spec=f"{SPEC} §2.5 (T = inf coupled flow, symmetric subspace); §1.3 and Decision 9 (finite-T noise)",
        description=(r"Gradient ascent on $J_\infty(Y, Z)$ restricted to the exact invariant subspace of "
                     "the official generator from zero init; each coordinate stands for a group of "
                     "equal entries of $Y$ or $Z$ and moves at rate/group size times "
                     r"$\partial J/\partial$coordinate. "
                     r"Definitions: $\tilde{c}$ (Eqn. 5), $\|\tilde{c}\|$, $f = \tilde{c}/\|\tilde{c}\|$, logits "
                     r"$w = Y^\top f$, softmax normaliser $S$; $\bar{x} = \partial J/\partial x$ ($\bar{f}$ is the "
                     r"back-propagated $g = Y(e_n - \alpha_n)$). $T$ (the sequence length) enters only the noise: the "
                     "minibatch noise of finite-$T$ count-vector SGD projected on the subspace "
                     "(see per_sample_system)."),
        noise=_symmetric_noise(U, has_common, has_cross) if noise else None,
    )


@lru_cache(maxsize=16)
def _per_sample(U: int, has_common: bool, has_cross: bool):
    """``(definitions, per-sample flow, per-sample loss)`` of one sequence on the symmetric subspace."""
    lay = symmetric_layout(U, has_common, has_cross)
    s = dict(zip(lay.names, lay.symbols))
    q = sample_symbols(U, has_common)
    common = (sp.Integer(1), q[U], q[U + 1]) if has_common else None
    fwd, J = _class_objective(s, U, has_cross, q[:U], common)
    definitions, rhs = chain_rule_flow(fwd, J, lay.symbols, lay.weights, lay.rates)
    loss = -J
    for sym, e in reversed(fwd):
        loss = loss.xreplace({sym: e})
    return tuple(definitions), tuple(rhs), loss


def per_sample_loss(config: ScanSnapConfig) -> sp.Expr:
    """The per-sample loss ``l(theta; q) = -J_n(theta; q)`` of one sequence with frequencies
    :func:`sample_symbols` on the symmetric coordinates (cross-entropy of its next token; spec
    §1.3: a sequence enters the loss only through its count vector). Its value at ``q = P`` is
    ``-J_inf``, the objective of :func:`full_system`'s flow."""
    return _per_sample(*_layout_of(config))[2]


@lru_cache(maxsize=16)
def _per_sample_system(U: int, has_common: bool, has_cross: bool) -> ReducedSystem:
    lay = symmetric_layout(U, has_common, has_cross)
    definitions, rhs, _ = _per_sample(U, has_common, has_cross)
    return ReducedSystem(
        name="per_sample", paper=PAPER, state=lay.symbols,
        parameters=_symmetric_parameters(U, has_common) + sample_symbols(U, has_common), rhs=rhs,
        definitions=definitions, spec=f"{SPEC} §1.3 (one sequence's count vector)",
        description=(r"The per-sample flow $g(\theta; q)$ of one sequence with frequencies $q$ (the last "
                     r"parameters): gradient ascent on $J_n(\theta; q)$ with the metric of full_system, "
                     r"through the same named quantities; $g(\theta; P)$ is full_system's rhs."))


def per_sample_system(config: ScanSnapConfig) -> ReducedSystem:
    """The per-sample flow ``g(theta; q)`` as a system whose last parameters are the sample
    :func:`sample_symbols` (definitions kept: the fast numeric form of ``full_system(config).noise.
    gradient``, which holds the same flow expanded)."""
    return _per_sample_system(*_layout_of(config))


@lru_cache(maxsize=16)
def _symmetric_noise(U: int, has_common: bool, has_cross: bool):
    from ..noise import MonteCarlo, derive_noise

    lay = symmetric_layout(U, has_common, has_cross)
    q = sample_symbols(U, has_common)
    ref = f"theory.scan_snap.sde:{'count_sampler' if has_common else 'count_sampler_no_common'}"
    counts = MonteCarlo(q, ref=ref, description=(
        r"one sequence's frequencies $q = c/(T - 1)$, counts $c \sim \mathrm{Multinomial}(T - 1, P(\cdot \mid n))$ "
        "on the class support (docs/papers/scan_snap.md §1.3), exact; on the symmetric subspace every class gives "
        "the same law"))
    return derive_noise(
        _per_sample(U, has_common, has_cross)[2], lay.symbols, q, counts,
        preconditioner=[r / w for r, w in zip(lay.rates, lay.weights)],
        description=(r"finite-$T$ count-vector SGD projected on the symmetric subspace; time = optimiser steps "
                     r"$\times 1/(1 - \mathrm{momentum})$. The mean of $g$ is the finite-$T$ flow $E_q[g(\theta; q)]$, "
                     r"gradient ascent on $E_q[J_n(\theta; q)]$ (the loss is not linear in $q$): it is not this "
                     r"system's rhs, $g(\theta; E q)$ = the $T = \infty$ flow; the two differ by $O(1/T)$. The SDE "
                     r"(theory.scan_snap.sde) drifts with $E_q[g]$. The law of $q$ is exact (a multinomial), but "
                     r"$g$ is not polynomial in $q$ (a softmax of log-counts), so $\mathrm{Cov}_q[g]$ has no closed "
                     "form: it is estimated per step by Monte Carlo."))


def full_system(config: ScanSnapConfig, *, noise: bool = False) -> ReducedSystem:
    """The full ``T = inf`` coupled flow (Y, Z) derived from ``J_inf`` (spec §2.5), on the exact
    symmetric subspace of the official generator (:class:`SymmetricLayout`), parameters
    :func:`full_parameters`. Depends on the config only through ``U``, ``C > 0``, ``K > 1``.

    ``noise=True`` attaches the minibatch noise of finite-T count-vector SGD (:mod:`theory.noise`:
    the per-sample loss :func:`per_sample_loss` differentiated, the count vectors' exact Monte-Carlo
    law; what ``tdyn derive`` exports). Deriving it takes seconds (the expanded per-sample flow is
    large), so the solvers use the system without it; the SDE evaluates the same flow through
    :func:`per_sample_system` (named quantities kept)."""
    return _symmetric_system(*_layout_of(config), noise)


def full_parameters(config: ScanSnapConfig) -> dict[str, float]:
    """Values of :func:`full_system`'s parameters for ``config`` (P of class 0's profile)."""
    task = make_task(config)
    out = {"eta_Y": float(config.eta_Y), "eta_Z": float(config.eta_Z), "R": float(config.M_out - config.K),
           "K": float(config.K), "T": float(config.T), "C": float(config.num_common),
           "N_q": float(config.num_last)}
    if config.num_common:
        out["P_c"] = float(task.P[0, task.common[0]])
    out.update({f"P_dt_{j}": float(task.P[0, l]) for j, l in enumerate(task.dt[0])})
    return out


# ------------------------------------------------------------------------------------------------
# The general (non-symmetric) flow, numeric P (tests on tiny instances)
# ------------------------------------------------------------------------------------------------
def _y_symbol(l: int, k) -> sp.Symbol:
    return sp.Symbol(f"Y_{l}_{k}", real=True)


def _z_symbol(m: int, l: int) -> sp.Symbol:
    return sp.Symbol(f"z_{m}_{l}", real=True)


def state_layout(task: ScanSnapTask):
    """Rows, columns and symbols of :func:`general_system`'s state."""
    rows = [int(l) for l in task.union_support]
    cols = list(range(task.K)) + ["o"]
    Ys = [[_y_symbol(l, k) for l in rows] for k in cols]
    zs = [[_z_symbol(m, int(l)) for l in task.query_support(m)] for m in range(task.num_last)]
    return rows, cols, Ys, zs


@lru_cache(maxsize=8)
def _general_system(config: ScanSnapConfig) -> ReducedSystem:
    task = make_task(config)
    rows, cols, Ys, zs = state_layout(task)
    P_rows = [{int(l): float(task.P[n, l]) for l in task.support(n)} for n in range(task.K)]
    z_rows = [dict(zip((int(l) for l in task.query_support(m)), zs[m])) for m in range(task.num_last)]
    Y_cols = [dict(zip(rows, col)) for col in Ys]
    mult = [1] * task.K + [R_sym]
    J, _ = population_objective(P_rows, z_rows, Y_cols, list(task.query_index), list(range(task.K)), mult)
    blocks = [(tuple(s for col in Ys[: task.K] for s in col), 1, eta_Y), (tuple(Ys[-1]), R_sym, eta_Y),
              (tuple(s for row in zs for s in row), 1, eta_Z)]
    rhs = gradient_ascent_flow(J, blocks)
    state = tuple(s for b in blocks for s in b[0])
    return ReducedSystem(
        name="general", paper=PAPER, state=state, parameters=(eta_Y, eta_Z, R_sym), rhs=tuple(rhs),
        observables={"population_loss": -J}, spec=f"{SPEC} §2.5 (T = inf coupled flow)",
        description=(r"Gradient ascent on $J_\infty(Y, Z)$ for the numeric instance; $Y$ restricted to the "
                     r"union of supports and to $K$ label columns + one shared non-label column "
                     r"(exact from $Y(0) = 0$); $z$ restricted to the supports of each query's classes."),
    )


def general_system(config: ScanSnapConfig) -> ReducedSystem:
    """The ``T = inf`` coupled flow (Y, Z) derived from ``J_inf`` for ``config``'s instance with no
    symmetry assumed (only the shared non-label column); parameters ``eta_Y, eta_Z, R``. Exact from
    zero init and for any non-symmetric state; expensive beyond small instances, so the pipeline
    uses :func:`full_system` and tests compare the two on small instances."""
    key = ScanSnapConfig(num_last=config.num_last, num_next_per_last=config.num_next_per_last,
                         num_common=config.num_common, num_unique_per_next=config.num_unique_per_next,
                         common_prob=config.common_prob, unique_min=config.unique_min,
                         unique_max=config.unique_max, vocab=config.vocab)
    return _general_system(key)


# ------------------------------------------------------------------------------------------------
# Symbolic minimal instance (spec Appendix A)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def minimal_instance() -> dict[str, Any]:
    """K = 2 classes sharing one query; tokens c (common), a1, a2 (class 1), b1, b2 (class 2);
    output columns n1, n2 and one extra 'other' column. Returns symbols, ``J``, ``f`` and the
    derived gradients ``dJ/dz``, ``dJ/dY`` and ``dJ/df_n``."""
    toks = ["c", "a1", "a2", "b1", "b2"]
    z = {l: sp.Symbol(f"z_{l}", real=True) for l in toks}
    Pc1, Pa1, Pa2, Pc2, Pb1, Pb2 = sp.symbols("P_c1 P_a1 P_a2 P_c2 P_b1 P_b2", positive=True)
    P_rows = [{"c": Pc1, "a1": Pa1, "a2": Pa2}, {"c": Pc2, "b1": Pb1, "b2": Pb2}]
    cols = ["n1", "n2", "o"]
    Y = {(l, k): sp.Symbol(f"Y_{l}_{k}", real=True) for l in toks for k in cols}
    Y_cols = [{l: Y[(l, k)] for l in toks} for k in cols]
    J, f = population_objective(P_rows, [z], Y_cols, [0, 0], [0, 1])
    # dJ/df_n with f_n as free symbols (chain-rule factor of the z-gradient)
    fsym = [{l: sp.Symbol(f"f{n + 1}_{l}", real=True) for l in P_rows[n]} for n in range(2)]
    Jf = 0
    for n in range(2):
        w = [sum(col[l] * fsym[n][l] for l in fsym[n]) for col in Y_cols]
        Jf += sp.Rational(1, 2) * (w[n] - sp.log(sum(sp.exp(wk) for wk in w)))
    return {
        "tokens": toks, "z": z, "P_rows": P_rows, "Y": Y, "cols": cols, "J": J, "f": f,
        "dJ_dz": {l: sp.diff(J, z[l]) for l in toks},
        "dJ_dY": {key: sp.diff(J, s) for key, s in Y.items()},
        "f_symbols": fsym, "J_of_f": Jf,
        "dJ_df": [{l: sp.diff(Jf, s) for l, s in fsym[n].items()} for n in range(2)],
    }


# ------------------------------------------------------------------------------------------------
# States <-> full parameters: Y (M_in, M_out), Z (M_in, M_in) of the official generator's instance
# (numpy, float64)
# ------------------------------------------------------------------------------------------------
def general_state_vector(task: ScanSnapTask, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Full parameters ``Y`` (M_in, M_out), ``Z`` (M_in, M_in) -> the full system's state. The
    shared non-label column is read as the mean of the non-label columns (exact when equal)."""
    rows = task.union_support
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    parts = [Y[rows][:, task.label].T.ravel(), Y[rows][:, others].mean(1)]
    parts += [Z[task.query[np.argmax(task.query_index == m)], task.query_support(m)] for m in range(task.num_last)]
    return np.concatenate(parts)


def unpack_general_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`general_state_vector` on (..., dim) arrays -> ``Y`` (..., M_in, M_out),
    ``Z`` (..., M_in, M_in) (entries outside the state are 0)."""
    y = np.asarray(y, dtype=np.float64)
    lead = y.shape[:-1]
    rows = task.union_support
    nr, K = rows.size, task.K
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    lab = y[..., : K * nr].reshape(lead + (K, nr))
    oth = y[..., K * nr: (K + 1) * nr]
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for k in range(K):
        Y[..., rows, task.label[k]] = lab[..., k, :]
    Y[..., rows[:, None], others[None, :]] = oth[..., :, None]
    i = (K + 1) * nr
    for m in range(task.num_last):
        sup = task.query_support(m)
        q = task.query[np.argmax(task.query_index == m)]
        Z[..., q, sup] = y[..., i: i + sup.size]
        i += sup.size
    return Y, Z


def z_state_names(task: ScanSnapTask) -> list[str]:
    return [str(_z_symbol(m, int(l))) for m in range(task.num_last) for l in task.query_support(m)]


def embed_symmetric_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric state (..., dim) -> full ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in)."""
    cfg = task.config
    lay = symmetric_layout(cfg.num_unique_per_next, cfg.num_common > 0, cfg.K > 1)
    y = np.asarray(y, np.float64)
    v = {n: y[..., i] for i, n in enumerate(lay.names)}
    lead = y.shape[:-1]
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for n in range(task.K):
        for j in range(cfg.num_unique_per_next):
            l = task.dt[n, j]
            for n2 in range(task.K):
                Y[..., l, task.label[n2]] = v[f"Y_own_{j}"] if n2 == n else v[f"Y_xlab_{j}"]
            Y[..., l, others] = v[f"Y_o_{j}"][..., None]
            Z[..., task.query[n], l] = v[f"z_dt_{j}"]
    for c in task.common:
        Y[..., c, task.label] = v["Y_c_lab"][..., None]
        Y[..., c, others] = v["Y_c_o"][..., None]
        for q in np.unique(task.query):
            Z[..., q, c] = v["z_c"]
    return Y, Z


def z_rows(task: ScanSnapTask, Z: np.ndarray) -> np.ndarray:
    """The moving attention logits: ``z[psi(n), supp(n)]`` for every class, (..., K, |supp|)."""
    idx = np.stack([task.support(n) for n in range(task.K)])
    return np.stack([Z[..., task.query[n], idx[n]] for n in range(task.K)], axis=-2)
