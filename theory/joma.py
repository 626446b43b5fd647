"""JoMA — joint MLP/attention dynamics of one Transformer block (Tian et al., ICLR 2024).

Spec: ``papers/joma.md``. Everything below is derived from the model definition (spec §1.1):
``b = sigma(z) o x / A`` (linear / exp / softmax attention over contextual tokens, logit
temperature ``tau`` for exp and softmax), residual ``f = U_C b + u_q``, lower MLP
``h_k = phi(w_k^T f) = phi(v_k^T b + s_k)``, stationary back-propagated gradient ``g_k``
(Assumption 1, spec §1.3). Nothing here types the paper's printed equations; the tests do.

What this module derives with sympy
1. the per-sample objective ``J = sum_k g_k phi(v_k . b + s_k)``; gradient *ascent* on ``J`` is
   gradient descent on the loss (``g = -dL/dh``); the block flow (spec §2.1) is the mean over a
   data set of token-frequency rows ``x_n`` with gradients ``g_n`` (:func:`block_system`);
2. Theorem 1 (spec §2.2): the exact invariants (linear, exp) as expressions whose Lie derivative
   simplifies to 0, and for softmax the approximate invariant plus its exact residual
   (:func:`softmax_invariant_residual`);
3. the integrated-out MLP dynamics (spec §2.3) by substituting the invariant into ``v_dot``; its
   linear-activation, ``K = 1`` case (Theorem 2, spec §2.4) with the erfinv closed form and the
   blow-up times (:func:`theorem2_system`);
4. the nonlinear reduced ODEs (spec §2.5): ``v_dot = (mu - v) o exp(v^2/2)`` (paper) and
   ``(mu - v) o softmax(v^2/T)`` (official Fig. 4 variant), with attention entropy observables,
   convergence times ``t_j(eps)`` and the fixed-point entropy;
5. HBLT co-occurrence (Theorem 5, spec §3.3) from the spin representation; stable rank (§2.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from .core import ParamsBase, ReducedSystem
from .errors import ConfigError, check_choice

PAPER = "joma"
SPEC = "papers/joma.md"

__all__ = [
    "PAPER", "KINDS", "ACTIVATIONS", "JomaConfig", "Config",
    "per_sample_objective", "per_sample_flow", "block_system", "invariant_expressions",
    "softmax_invariant_residual", "integrated_system", "theorem2_system", "theorem2_closed_form", "blow_up_times",
    "nonlinear_exp_system", "nonlinear_softmax_system", "convergence_time",
    "fixed_point_entropy", "entropy", "stable_rank", "cooccurrence_formula",
    "cooccurrence_probability", "make_data", "block_parameters", "block_initial_state", "BlockMinibatchSDE", "minibatch_sde",
    "state_names", "systems", "default_run", "ode_time", "FIG4_MU",
    "normalised_correlation", "slope_sign_changes", "drops_then_bounces", "hblt_leaf_lca_heights",
]

KINDS = ("linear", "exp", "softmax")
ACTIVATIONS = ("linear", "tanh", "relu")
t_sym = sp.Symbol("t", real=True)
tau = sp.Symbol("tau", positive=True)  # logit temperature (exp/softmax attention)

#: mu of the official Fig. 4 script (torch seed 0, spec §5 Fig. 4).
FIG4_MU = (1.2655, 1.3960, 1.9222, 2.3668, 2.4703, 2.4889, 2.8969, 2.9023, 3.3046, 3.6892)


def _phi(activation: str):
    """The MLP nonlinearity as a sympy function of one argument."""
    if activation == "linear":
        return lambda u: u
    if activation == "tanh":
        return sp.tanh
    if activation == "relu":
        return lambda u: sp.Max(0, u)
    raise ConfigError("activation", f"must be one of {ACTIVATIONS}, got {activation!r}")


# ------------------------------------------------------------------------------------------------
# Symbols: z_l (attention logits), v_k_l = u_l^T w_k, s_k = u_q^T w_k, x_l, g_k
# ------------------------------------------------------------------------------------------------
def _z(Mc):
    return tuple(sp.Symbol(f"z_{l}", real=True) for l in range(1, Mc + 1))


def _v(Mc, K):
    return tuple(tuple(sp.Symbol(f"v_{k}_{l}", real=True) for l in range(1, Mc + 1)) for k in range(1, K + 1))


def _s(K):
    return tuple(sp.Symbol(f"s_{k}", real=True) for k in range(1, K + 1))


def state_names(Mc: int, K: int) -> tuple[str, ...]:
    """Block-system state order: ``z_1..z_Mc, v_1_1..v_K_Mc, s_1..s_K``."""
    return tuple(str(s) for s in (*_z(Mc), *(x for row in _v(Mc, K) for x in row), *_s(K)))


def attention_output(kind: str, x, z):
    """``b`` of spec §1.1 as sympy expressions (tuple over tokens)."""
    if kind == "linear":
        return tuple(xi * zi for xi, zi in zip(x, z))
    e = tuple(xi * sp.exp(zi / tau) for xi, zi in zip(x, z))
    if kind == "exp":
        return e
    if kind == "softmax":
        A = sum(e)
        return tuple(ei / A for ei in e)
    raise ConfigError("kind", f"must be one of {KINDS}, got {kind!r}")


def per_sample_objective(kind: str, activation: str, Mc: int, K: int):
    """``(J, x, g)``: ``J = sum_k g_k phi(v_k . b(x, z) + s_k)`` for one sample (spec §2.1,
    Appendix); ``x`` (Mc symbols), ``g`` (K symbols)."""
    x = tuple(sp.Symbol(f"x_{l}", nonnegative=True) for l in range(1, Mc + 1))
    g = tuple(sp.Symbol(f"g_{k}", real=True) for k in range(1, K + 1))
    z, V, s = _z(Mc), _v(Mc, K), _s(K)
    b = attention_output(kind, x, z)
    phi = _phi(activation)
    J = sum(g[k] * phi(sum(V[k][l] * b[l] for l in range(Mc)) + s[k]) for k in range(K))
    return J, x, g


@lru_cache(maxsize=None)
def per_sample_flow(kind: str, activation: str, Mc: int, K: int):
    """Per-sample gradient-ascent directions ``dJ/d(state)`` in :func:`state_names` order, with the
    sample's symbols ``(x, g)``. Learning rate 1 for ``w`` and ``z`` (spec §2.1)."""
    J, x, g = per_sample_objective(kind, activation, Mc, K)
    state = (*_z(Mc), *(c for row in _v(Mc, K) for c in row), *_s(K))
    return tuple(sp.diff(J, c) for c in state), x, g, state


def _data_symbols(N, Mc, K):
    X = tuple(tuple(sp.Symbol(f"x_{n}_{l}", nonnegative=True) for l in range(1, Mc + 1)) for n in range(1, N + 1))
    G = tuple(tuple(sp.Symbol(f"g_{n}_{k}", real=True) for k in range(1, K + 1)) for n in range(1, N + 1))
    return X, G


def invariant_expressions(kind: str, Mc: int, K: int, bbar=None) -> dict[str, sp.Expr]:
    """Theorem 1 (spec §2.2), one expression per token ``l`` (constant along the flow):
    linear ``z_l^2 - sum_k v_kl^2``; exp ``z_l - sum_k v_kl^2/(2 tau)``; softmax (approximate)
    ``z_l - (sum_k v_kl^2 - bbar_l sum_k |v_k|^2)/(2 tau)``."""
    z, V = _z(Mc), _v(Mc, K)
    out = {}
    for l in range(Mc):
        sq = sum(V[k][l] ** 2 for k in range(K))
        if kind == "linear":
            out[f"invariant_{l + 1}"] = z[l] ** 2 - sq
        elif kind == "exp":
            out[f"invariant_{l + 1}"] = z[l] - sq / (2 * tau)
        else:
            bb = bbar[l] if bbar is not None else sp.Symbol(f"bbar_{l + 1}", positive=True)
            norms = sum(V[k][j] ** 2 for k in range(K) for j in range(Mc))
            out[f"invariant_{l + 1}"] = z[l] - (sq - bb * norms) / (2 * tau)
    return out


@lru_cache(maxsize=None)
def block_system(kind: str = "exp", activation: str = "linear", Mc: int = 3, K: int = 2, N: int = 2) -> ReducedSystem:
    """The block flow (spec §2.1) for a data set of ``N`` token-frequency rows ``x_n`` with
    stationary gradients ``g_n``: ``d(state)/dt = (1/N) sum_n dJ_n/d(state)``.

    State ``z_l``, ``v_k_l``, ``s_k``; parameters ``x_n_l``, ``g_n_k`` (and ``tau`` for exp/softmax;
    ``bbar_l`` for the softmax invariant's observables). Time = learning rate x steps."""
    if min(Mc, K, N) < 1:
        raise ConfigError("K" if K < 1 else ("Mc" if Mc < 1 else "N"), "must be >= 1")
    flow, x, g, state = per_sample_flow(kind, activation, Mc, K)
    X, G = _data_symbols(N, Mc, K)
    rhs = []
    for e in flow:
        total = 0
        for n in range(N):
            sub = {**dict(zip(x, X[n])), **dict(zip(g, G[n]))}
            total += e.xreplace(sub)
        rhs.append(total / N)
    params = tuple(c for row in X for c in row) + tuple(c for row in G for c in row)
    bbar = ()
    if kind in ("exp", "softmax"):
        params = params + (tau,)
    if kind == "softmax":
        bbar = tuple(sp.Symbol(f"bbar_{l}", positive=True) for l in range(1, Mc + 1))
        params = params + bbar
    inv = invariant_expressions(kind, Mc, K, bbar or None)
    obs = dict(inv)
    return ReducedSystem(
        name=f"block_{kind}_{activation}",
        paper=PAPER,
        state=state,
        parameters=params,
        rhs=tuple(rhs),
        observables=obs,
        invariants=inv,
        spec=f"{SPEC} §2.1-2.2 ({kind} attention, {activation} MLP, Mc={Mc}, K={K}, N={N})",
        description=("Gradient flow of one JoMA block (free attention logits z of the query over "
                     "contextual tokens, lower-MLP weights projected on the orthonormal embeddings) "
                     "under a stationary back-propagated gradient; derived from the per-sample "
                     "objective J = sum_k g_k phi(v_k.b + s_k)."),
    )


def softmax_invariant_residual(Mc: int = 3, K: int = 2, N: int = 2, activation: str = "linear"):
    """Exact ``d/dt (z - zhat)`` of the softmax block flow with constant ``bbar`` (spec §2.2): the
    term conditions (i)-(ii) neglect. Returns one expression per token (state and parameters of
    :func:`block_system`); its size measures how well the approximate invariant holds."""
    sysm = block_system("softmax", activation, Mc, K, N)
    return tuple(-sysm.time_derivative(e) for e in sysm.invariants.values())


# ------------------------------------------------------------------------------------------------
# Integrated-out MLP dynamics and Theorem 2 (spec §2.3-2.4)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def integrated_system(kind: str = "exp", activation: str = "linear", Mc: int = 3, K: int = 2, N: int = 2) -> ReducedSystem:
    """MLP-only dynamics with attention integrated out (spec §2.3): the ``v``/``s`` rows of
    :func:`block_system` with ``z`` replaced by the Theorem-1 invariant solved for ``z`` (constant
    ``c_l`` as parameters; ``c = 0`` for zero init). Exact for exp attention; for softmax it uses
    the approximate invariant with constant ``bbar`` (conditions (i)-(ii)). Observables: the
    attention logits ``z_l`` implied by the invariant."""
    if kind not in ("exp", "softmax"):
        raise ConfigError("kind", "attention can be integrated out for exp or softmax (linear keeps a sign choice)")
    blk = block_system(kind, activation, Mc, K, N)
    z, V = _z(Mc), _v(Mc, K)
    c = tuple(sp.Symbol(f"c_{l}", real=True) for l in range(1, Mc + 1))
    zsol = {}
    for l, expr in enumerate(blk.invariants.values()):
        (sol,) = sp.solve(sp.Eq(expr, c[l]), z[l])  # the invariants are linear in z_l
        zsol[z[l]] = sol
    keep = [i for i, st in enumerate(blk.state) if st not in set(z)]
    state = tuple(blk.state[i] for i in keep)
    rhs = tuple(blk.rhs[i].xreplace(zsol) for i in keep)
    params = tuple(blk.parameters) + c
    return ReducedSystem(
        name=f"integrated_{kind}_{activation}", paper=PAPER, state=state, parameters=params, rhs=rhs,
        observables={str(zl): zsol[zl] for zl in z},
        spec=f"{SPEC} §2.3 (attention integrated out, {kind}, {activation} MLP, Mc={Mc}, K={K}, N={N})",
        description="v_dot_k = E[g_k h'_k x o exp(z/tau)]/A with z = (1/2 tau) sum_s v_s^2 (+ bbar term for softmax) + c.",
    )


@lru_cache(maxsize=None)
def theorem2_system(Mc: int = 3, N: int = 2) -> ReducedSystem:
    """``v_dot_l = Delta_l exp(v_l^2/2)`` (spec §2.4): the exp block flow with ``K = 1``, linear
    ``phi``, ``tau = 1``, after substituting the invariant ``z = v^2/2`` (zero init, ``c = 0``).

    Derived: ``v_dot`` is taken from :func:`block_system`, ``z`` is eliminated with the invariant,
    and the remaining data factor is identified with ``Delta_l = (1/N) sum_n g_n x_nl``; the
    identification is asserted symbolically here (raises if it fails)."""
    blk = block_system("exp", "linear", Mc, 1, N)
    z, V = _z(Mc), _v(Mc, 1)
    X, G = _data_symbols(N, Mc, 1)
    v = tuple(sp.Symbol(f"v_{l}", real=True) for l in range(1, Mc + 1))
    Delta = tuple(sp.Symbol(f"Delta_{l}", real=True) for l in range(1, Mc + 1))
    rhs = []
    for l in range(Mc):
        vdot = blk.rhs_dict[V[0][l]].subs(tau, 1)
        integrated = vdot.xreplace({z[j]: V[0][j] ** 2 / 2 for j in range(Mc)})  # invariant, c = 0
        delta_data = sum(G[n][0] * X[n][l] for n in range(N)) / N
        factor = sp.simplify(integrated / sp.exp(V[0][l] ** 2 / 2) - delta_data)
        if factor != 0:  # pragma: no cover - derivation guard
            raise RuntimeError(f"Theorem 2 reduction failed for component {l}: {factor}")
        rhs.append((integrated / delta_data * Delta[l]).xreplace({V[0][j]: v[j] for j in range(Mc)}))
    rhs = [sp.simplify(r) for r in rhs]
    a = [sp.exp(vl**2 / 2) for vl in v]  # attention weights for uniform x, z = v^2/2
    A = sum(a)
    H = -sum((ai / A) * sp.log(ai / A) for ai in a)
    closed = {f"v_{l + 1}": theorem2_closed_form(Delta[l], t_sym) for l in range(Mc)}
    closed.update({f"blow_up_{l + 1}": sp.sqrt(sp.pi / 2) / sp.Abs(Delta[l]) for l in range(Mc)})
    return ReducedSystem(
        name="theorem2", paper=PAPER, state=v, parameters=Delta, rhs=tuple(rhs),
        observables={"attention_entropy": H}, closed_forms=closed,
        spec=f"{SPEC} §2.4 (Theorem 2, linear activation, K=1, exp attention)",
        description="Integrated-out MLP dynamics with linear activation: components decouple and blow up "
                    "at t*_l = sqrt(pi/2)/|Delta_l|; the most salient component first.",
    )


def theorem2_closed_form(Delta, t):
    """``v(t) = sqrt(2) erfinv(sqrt(2/pi) Delta t)`` for ``v(0) = 0`` (spec §2.4)."""
    return sp.sqrt(2) * sp.erfinv(sp.sqrt(2 / sp.pi) * Delta * t)


def blow_up_times(Delta) -> np.ndarray:
    """``t*_l = sqrt(pi/2)/|Delta_l|`` (inf where Delta_l = 0)."""
    D = np.abs(np.asarray(Delta, float))
    with np.errstate(divide="ignore"):
        return np.where(D > 0, math.sqrt(math.pi / 2) / D, np.inf)


# ------------------------------------------------------------------------------------------------
# Nonlinear reduced dynamics (spec §2.5)
# ------------------------------------------------------------------------------------------------
def _entropy_expr(logits):
    a = [sp.exp(e) for e in logits]
    A = sum(a)
    return -sum((ai / A) * sp.log(ai / A) for ai in a)


@lru_cache(maxsize=None)
def nonlinear_exp_system(n: int = 10) -> ReducedSystem:
    """``v_dot = (mu - v) o exp(v^2/2)`` (spec §2.5, paper's equation, exp attention, uniform x).

    Built as: MLP-only flow ``grad_v (-|mu - v|^2/2) = mu - v`` (Theorem 3's toy simplification),
    times the attention factor ``exp(z)`` with ``z`` integrated out by the exp invariant
    ``z = v^2/2`` (spec §2.3). Observable: attention entropy of ``a = softmax(v^2/2)``."""
    v = tuple(sp.Symbol(f"v_{j}", real=True) for j in range(1, n + 1))
    mu = tuple(sp.Symbol(f"mu_{j}", real=True) for j in range(1, n + 1))
    z = tuple(sp.Symbol(f"z_{j}", real=True) for j in range(1, n + 1))
    J0 = -sum((m - vi) ** 2 for m, vi in zip(mu, v)) / 2
    rhs = tuple((sp.diff(J0, vi) * sp.exp(zi)).subs(zi, vi**2 / 2) for vi, zi in zip(v, z))
    return ReducedSystem(
        name="nonlinear_exp", paper=PAPER, state=v, parameters=mu, rhs=rhs,
        observables={"attention_entropy": _entropy_expr([vi**2 / 2 for vi in v])},
        spec=f"{SPEC} §2.5 (nonlinear activation, exp attention; paper's equation)",
        description="Components converge to mu_j at local rate exp(mu_j^2/2); entropy drops then bounces.",
    )


@lru_cache(maxsize=None)
def nonlinear_softmax_system(n: int = 10) -> ReducedSystem:
    """``v_dot = (mu - v) o softmax(v^2/T)`` (spec §2.5, the official Fig. 4 script's variant,
    Decision 6); time = eta x iterations. Observable: entropy of ``softmax(v^2/T)``."""
    v = tuple(sp.Symbol(f"v_{j}", real=True) for j in range(1, n + 1))
    mu = tuple(sp.Symbol(f"mu_{j}", real=True) for j in range(1, n + 1))
    T = sp.Symbol("T", positive=True)
    e = [sp.exp(vi**2 / T) for vi in v]
    A = sum(e)
    J0 = -sum((m - vi) ** 2 for m, vi in zip(mu, v)) / 2
    rhs = tuple(sp.diff(J0, vi) * ei / A for vi, ei in zip(v, e))
    return ReducedSystem(
        name="nonlinear_softmax", paper=PAPER, state=v, parameters=(*mu, T), rhs=rhs,
        observables={"attention_entropy": _entropy_expr([vi**2 / T for vi in v])},
        spec=f"{SPEC} §2.5 / §5 Fig. 4 (official code's softmax(v^2/T) variant)",
        description="Normalised-attention variant simulated by the official Fig. 4 script.",
    )


def convergence_time(mu: float, eps: float) -> float:
    """``t_j(eps) = int_0^{(1-eps) mu} exp(-r^2/2)/(mu - r) dr``: time for ``v_dot = (mu - v)
    exp(v^2/2)`` to go from 0 to ``(1 - eps) mu`` (spec §2.5)."""
    from scipy.integrate import quad

    if not 0 < eps < 1:
        raise ConfigError("eps", f"must be in (0, 1), got {eps}")
    if mu <= 0:
        raise ConfigError("mu", f"must be > 0, got {mu}")
    val, _ = quad(lambda r: math.exp(-r * r / 2) / (mu - r), 0.0, (1 - eps) * mu, limit=200)
    return float(val)


def entropy(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy (nats) of ``softmax(logits)`` along ``axis``."""
    a = np.asarray(logits, float)
    a = a - a.max(axis=axis, keepdims=True)
    p = np.exp(a)
    p /= p.sum(axis=axis, keepdims=True)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=axis)


def fixed_point_entropy(mu, x=None, temperature: float = 2.0) -> float:
    """``H(softmax(mu^2/temperature + log x))``: the entropy the nonlinear dynamics end at (spec
    §2.5; temperature 2 is the paper's ``exp(v^2/2)``, 3 the Fig. 4 script's)."""
    mu = np.asarray(mu, float)
    logx = np.zeros_like(mu) if x is None else np.log(np.asarray(x, float))
    return float(entropy(mu**2 / temperature + logx))


def stable_rank(W) -> float:
    """``sr(W) = |W|_F^2 / |W|_2^2`` (spec §2.6, Decision 10)."""
    W = np.asarray(W, float)
    s = np.linalg.svd(W, compute_uv=False)
    return float((s**2).sum() / s[0] ** 2) if s[0] > 0 else 0.0


def slope_sign_changes(H, tol: float = 1e-7) -> np.ndarray:
    """Indices where the slope of ``H`` changes sign, ignoring steps with ``|dH| <= tol`` (flat
    plateaus, integrator noise). Drop-then-bounce = exactly one change, from down to up."""
    d = np.diff(np.asarray(H, float))
    sig = np.sign(d)[np.abs(d) > tol]
    idx = np.nonzero(np.abs(d) > tol)[0]
    return idx[1:][np.diff(sig) != 0]


def drops_then_bounces(H, tol: float = 1e-7) -> bool:
    """True when ``H`` first decreases, then increases, with a single turning point."""
    d = np.diff(np.asarray(H, float))
    sig = np.sign(d)[np.abs(d) > tol]
    return bool(sig.size > 1 and sig[0] < 0 and sig[-1] > 0 and len(slope_sign_changes(H, tol)) == 1)


def normalised_correlation(a, b, axis: int = -1) -> np.ndarray:
    """NC = Pearson correlation (centred, normalised dot product) along ``axis`` (spec §5 Fig. 2)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a = a - a.mean(axis, keepdims=True)
    b = b - b.mean(axis, keepdims=True)
    den = np.sqrt((a * a).sum(axis) * (b * b).sum(axis))
    return np.where(den > 0, (a * b).sum(axis) / np.where(den > 0, den, 1.0), np.nan)


# ------------------------------------------------------------------------------------------------
# HBLT co-occurrence (spec §3.3), derived from spins s = 2y - 1
# ------------------------------------------------------------------------------------------------
def cooccurrence_formula():
    """``(E[s_l s_m], P(y_l=1|y_m=1))`` as sympy expressions of ``rho``, ``H``, ``rho0``.

    Derivation: ``E[s_child | s_parent] = rho s_parent`` along each of the ``H`` edges from the
    LCA ``alpha`` to each leaf, independently given ``s_alpha``; so ``E[s_l | s_alpha] = rho^H
    s_alpha``, ``E[s_l s_m] = rho^{2H} E[s_alpha^2] = rho^{2H}``, ``E[s_l] = rho^H rho0``. Then
    ``P(y_l=1, y_m=1) = E[(1+s_l)(1+s_m)]/4`` and ``P(y_m=1) = (1 + E s_m)/2``."""
    rho, rho0 = sp.symbols("rho rho0", real=True)
    H = sp.Symbol("H", positive=True, integer=True)
    s_alpha = sp.Symbol("s_alpha")
    cond_mean = rho**H * s_alpha  # E[s_leaf | s_alpha]
    Ess = sp.expand(cond_mean * cond_mean).subs(s_alpha**2, 1)  # s_alpha^2 = 1
    Es = cond_mean.subs(s_alpha, rho0)
    joint = (1 + 2 * Es + Ess) / 4
    marg = (1 + Es) / 2
    return Ess, sp.simplify(joint / marg)


def cooccurrence_probability(rho: float, H, rho0: float = 0.0):
    """Numeric ``P(y_l=1 | y_m=1)`` for LCA height(s) ``H``."""
    _, P = cooccurrence_formula()
    f = sp.lambdify((sp.Symbol("rho", real=True), sp.Symbol("H", positive=True, integer=True),
                     sp.Symbol("rho0", real=True)), P, "numpy")
    return f(rho, np.asarray(H, float), rho0)


def hblt_leaf_lca_heights(depth: int, branching: int, query: int = 0) -> np.ndarray:
    """LCA height ``H`` of every leaf with leaf ``query`` in a complete tree (leaves numbered
    left to right; ``H = 0`` for the query itself, ``depth`` when the LCA is the root)."""
    n = branching**depth
    H = np.zeros(n, dtype=int)
    for leaf in range(n):
        a, b, h = leaf, query, 0
        while a != b:
            a, b, h = a // branching, b // branching, h + 1
        H[leaf] = h
    return H


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JomaConfig(ParamsBase):
    """One JoMA block and its data (spec §1, §5), plus the HBLT generator (spec §3.2).

    Block: ``Mc`` contextual tokens, ``K`` hidden units, ``N`` samples (classes ``y``, each an
    infinite sequence with token frequencies ``x = P(l | y)``), embedding dim ``d > Mc``.
    ``gradient`` ``"centred"`` is the stationary ``G = I - 11^T/K`` of the official toy (needs
    ``N == K``), ``"random"`` a fixed Gaussian ``G``. Training: full-batch SGD, learning rate ``lr``
    on every parameter, ODE time ``t = lr * step``.
    HBLT: a complete ``branching``-ary tree of depth ``depth``; symmetric channel ``(1+rho)/2``;
    top-level latents on with probability ``p_top``.
    """

    kind: str = "exp"
    activation: str = "linear"
    Mc: int = 6
    K: int = 3
    N: int = 3
    d: int = 12
    temperature: float = 1.0
    data: str = "gaussian"  # "gaussian" or "random" X (spec §5 Fig. 2)
    gradient: str = "centred"
    lr: float = 0.005
    steps: int = 2600
    log_every: int = 40
    init_scale: float = 0.0  # std of W(0), z(0); 0 = zero init (c = 0)
    batch: int = 1  # minibatch size of the SDE (samples drawn with replacement from the N rows)
    data_seed: int = 0
    seed: int = 0
    depth: int = 3
    branching: int = 2
    rho: float = 0.6
    p_top: float = 0.5

    def validate(self) -> None:
        check_choice("kind", self.kind, KINDS)
        check_choice("activation", self.activation, ACTIVATIONS)
        for name in ("Mc", "K", "N"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.d < self.Mc + 1:
            raise ConfigError("d", f"embedding dim must be >= Mc + 1 = {self.Mc + 1} (orthonormal tokens), got {self.d}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError("temperature", f"must be a finite number > 0, got {self.temperature}")
        if self.data not in ("gaussian", "random"):
            raise ConfigError("data", f"must be 'gaussian' or 'random', got {self.data!r}")
        if self.gradient not in ("centred", "random"):
            raise ConfigError("gradient", f"must be 'centred' or 'random', got {self.gradient!r}")
        if self.gradient == "centred" and self.N != self.K:
            raise ConfigError("N", f"the centred gradient G = I - 11^T/K needs N == K, got N={self.N}, K={self.K}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", f"learning rate must be a finite number > 0, got {self.lr}")
        for name in ("steps", "log_every", "batch"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ConfigError("init_scale", f"must be >= 0, got {self.init_scale}")
        if self.kind == "linear" and self.init_scale == 0:
            raise ConfigError("init_scale", "linear attention with zero init is a fixed point (Decision 5); use > 0")
        if self.depth < 1:
            raise ConfigError("depth", f"HBLT tree depth must be >= 1, got {self.depth}")
        if self.branching < 2:
            raise ConfigError("branching", f"must be >= 2, got {self.branching}")
        for name in ("rho", "p_top"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 1):
                raise ConfigError(name, f"probability must lie in [0, 1], got {v}")


Config = JomaConfig


def ode_time(step: int, lr: float) -> float:
    """Full-batch SGD step -> gradient-flow time (equal learning rates on w and z, Decision 3)."""
    return float(step) * float(lr)


# ------------------------------------------------------------------------------------------------
# Data of the block (spec §5 Fig. 2): X (N, Mc) rows x_n = P(. | y = n), G (N, K)
# ------------------------------------------------------------------------------------------------
def make_data(config: JomaConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(X, G)``. ``X[n] = P(l | y = n)``: half "distinct" tokens peaked around a
    class-dependent index (``data="gaussian"``, the official toy's scaled to ``Mc``) and half
    "common" uniform-random ones; rows normalised to 1."""
    rng = np.random.default_rng(config.data_seed)
    Mc, N, K = config.Mc, config.N, config.K
    X = rng.random((Mc, N)) / 2
    if config.data == "gaussian":
        nd = Mc // 2
        l = np.arange(nd)[:, None]
        y = np.arange(N)[None, :]
        X[:nd] = np.exp(-((l - y / N * nd) ** 2) / (30 * (nd / 10) ** 2 + 1e-12))
    X = X / X.sum(0, keepdims=True)
    if config.gradient == "centred":
        G = np.eye(K) - np.ones((K, K)) / K
    else:
        G = rng.standard_normal((N, K))
    return X.T.copy(), G


def initial_parameters(config: JomaConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(W0 (d, K), z0 (Mc,))``: Gaussian with std ``init_scale`` (the official toy uses 1/100)."""
    rng = np.random.default_rng(config.seed + 1000)
    W0 = rng.standard_normal((config.d, config.K)) * config.init_scale
    z0 = rng.standard_normal(config.Mc) * config.init_scale
    return W0, z0


def block_parameters(config: JomaConfig, X=None, G=None) -> dict[str, float]:
    X, G = (X, G) if X is not None else make_data(config)
    p = {f"x_{n + 1}_{l + 1}": float(X[n, l]) for n in range(X.shape[0]) for l in range(X.shape[1])}
    p.update({f"g_{n + 1}_{k + 1}": float(G[n, k]) for n in range(G.shape[0]) for k in range(G.shape[1])})
    p["tau"] = float(config.temperature)
    bbar = X.mean(0)  # Decision 4: bbar = E[x] (the value of E[b] at z = 0)
    p.update({f"bbar_{l + 1}": float(bbar[l]) for l in range(X.shape[1])})
    return p


def block_initial_state(config: JomaConfig) -> dict[str, float]:
    """Reduced coordinates of the initial network: ``z``, ``v_k = U_C^T w_k`` (first Mc rows of W
    with the identity embedding), ``s_k = u_q^T w_k`` (row Mc)."""
    W0, z0 = initial_parameters(config)
    y = {f"z_{l + 1}": float(z0[l]) for l in range(config.Mc)}
    y.update({f"v_{k + 1}_{l + 1}": float(W0[l, k]) for k in range(config.K) for l in range(config.Mc)})
    y.update({f"s_{k + 1}": float(W0[config.Mc, k]) for k in range(config.K)})
    return y


# ------------------------------------------------------------------------------------------------
# SDE with minibatch noise (spec §2.7 — this project's extension, not in the paper)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class BlockMinibatchSDE:
    """``d theta = f(theta) dt + sqrt(lr/B) Sigma(theta)^{1/2} dW`` in ODE time ``t = lr * step``.

    ``f`` is the block flow (mean over the ``N`` rows of the derived per-sample flow); ``Sigma`` is
    the covariance of the per-sample flows over the rows (minibatches of ``B`` rows drawn with
    replacement). ``Sigma^{1/2} dW`` is realised as ``(F_n - mean F)^T / sqrt(N)`` driven by an
    ``N``-dimensional Brownian motion, so no matrix square root is formed. Float64."""

    config: JomaConfig
    paper: str = PAPER
    name: str = "block_minibatch_sgd"

    def _structure(self):
        c = self.config
        return (c.kind, c.activation, c.Mc, c.K, c.N)

    # Equal (and hashed) by structure: data, learning rate and batch travel in ``args``, so the
    # compiled ensemble solver is reused across them (simulate caches it per SDE object).
    def __eq__(self, other):
        return isinstance(other, BlockMinibatchSDE) and self._structure() == other._structure()

    def __hash__(self):
        return hash(("BlockMinibatchSDE", self._structure()))

    @property
    def noise_dim(self) -> int:
        return self.config.N

    @property
    def system(self) -> ReducedSystem:
        c = self.config
        return block_system(c.kind, c.activation, c.Mc, c.K, c.N)

    def _per_sample(self):
        return _per_sample_jax(self.config.kind, self.config.activation, self.config.Mc, self.config.K)

    def args(self):
        import jax.numpy as jnp

        X, G = make_data(self.config)
        return {"X": jnp.asarray(X), "G": jnp.asarray(G), "tau": jnp.asarray(float(self.config.temperature)),
                "scale": jnp.asarray(math.sqrt(self.config.lr / self.config.batch))}

    def initial_state(self) -> np.ndarray:
        return self.system.state_vector(block_initial_state(self.config))

    def _flows(self, y, args):
        import jax

        f = self._per_sample()
        return jax.vmap(lambda x, g: f(y, x, g, args["tau"]))(args["X"], args["G"])  # (N, dim)

    def drift(self, t, y, args):
        return self._flows(y, args).mean(0)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        F = self._flows(y, args)
        return args["scale"] * (F - F.mean(0)).T / jnp.sqrt(F.shape[0])

    def observables(self, Y):
        sysm = self.system
        p = sysm.parameter_vector(block_parameters(self.config))
        out = {n: np.asarray(Y[..., i]) for i, n in enumerate(sysm.state_names)}
        out.update(sysm.observables_numpy()(Y, p))
        return out


@lru_cache(maxsize=None)
def _per_sample_jax(kind, activation, Mc, K):
    """The derived per-sample flow as a jax function ``f(state, x, g, tau) -> (dim,)``."""
    import jax.numpy as jnp

    from .core import jax_modules

    flow, x, g, state = per_sample_flow(kind, activation, Mc, K)
    f = sp.lambdify((state, x, g, tau), list(flow), modules=jax_modules(), cse=True)
    return lambda y, xv, gv, t_: jnp.stack([jnp.asarray(o, dtype=y.dtype) * jnp.ones((), y.dtype)
                                            for o in f(y, xv, gv, t_)])


def minibatch_sde(config: JomaConfig):
    """``(sde, t)`` for `tdyn simulate joma --sde` (spec §2.7, labelled as this project's extension)."""
    n = config.steps // config.log_every + 1
    return BlockMinibatchSDE(config), np.linspace(0.0, ode_time(config.steps, config.lr), n)


def systems(config: JomaConfig | None = None) -> list[ReducedSystem]:
    """What `tdyn derive joma` prints: the block flow for the config, Theorem 2, the two nonlinear ODEs."""
    c = config or JomaConfig()
    return [block_system(c.kind, c.activation, c.Mc, c.K, c.N), theorem2_system(c.Mc, 1),
            nonlinear_exp_system(len(FIG4_MU)), nonlinear_softmax_system(len(FIG4_MU))]


def default_run(config: JomaConfig) -> dict[str, Any]:
    """The block ODE that `tdyn simulate joma` integrates: ``t = lr * step`` over the config's steps."""
    sysm = block_system(config.kind, config.activation, config.Mc, config.K, config.N)
    n = config.steps // config.log_every + 1
    # the block flow is not stiff, and Kvaerno5 takes ~30 s to compile for its 27 states: use Dopri8
    return {"system": sysm, "params": block_parameters(config), "y0": block_initial_state(config),
            "t": np.linspace(0.0, ode_time(config.steps, config.lr), n),
            "solve_options": {"diffrax": {"method": "Dopri8"}, "scipy": {"method": "DOP853"}}}


def problem(config) -> "Problem":
    """The :class:`~theory.Problem` that ``tdyn simulate`` integrates (wraps :func:`default_run`)."""
    from .problem import Problem

    run = default_run(config)
    return Problem(run["system"], run["params"], run["y0"], run["t"], run.get("solve_options", {}))
