"""JoMA derivation — joint MLP/attention dynamics of one Transformer block (Tian et al., ICLR 2024).

Spec: ``docs/papers/joma.md``. Everything below is derived from the model definition (spec §1.1):
``b = sigma(z) o x / A`` (linear / exp / softmax attention over contextual tokens, logit
temperature ``tau`` for exp and softmax), residual ``f = U_C b + u_q``, lower MLP
``h_k = phi(w_k^T f) = phi(v_k^T b + s_k)``, stationary back-propagated gradient ``g_k``
(Assumption 1, spec §1.3). Nothing here types the paper's printed equations; the tests do.

What this module derives with sympy
1. the per-sample objective ``J = sum_k g_k phi(v_k . b + s_k)``; gradient *ascent* on ``J`` is
   gradient descent on the per-sample loss ``l = -J`` (``g = -dl/dh``, :func:`per_sample_loss`);
   the block flow (spec §2.1) is the mean over a data set of token-frequency rows ``x_n`` with
   gradients ``g_n`` (:func:`block_system`), and its minibatch noise (spec §2.7, this project's
   extension) comes from the same per-sample loss over the same rows (:func:`rows_distribution`,
   :mod:`theory.noise`: a finite distribution, so ``Cov[g]`` is exact);
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

from functools import lru_cache

import sympy as sp

from ..core import ReducedSystem
from ..errors import ConfigError
from ..noise import Finite, derive_noise
from .config import ACTIVATIONS, ATTENTIONS, PAPER, SPEC

__all__ = [
    "t_sym", "tau", "state_names", "attention_output", "per_sample_objective", "per_sample_flow", "per_sample_loss",
    "rows_distribution",
    "invariant_expressions", "block_system", "softmax_invariant_residual", "integrated_system",
    "theorem2_system", "theorem2_closed_form", "nonlinear_exp_system", "nonlinear_softmax_system",
    "cooccurrence_formula",
]

t_sym = sp.Symbol("t", real=True)
tau = sp.Symbol("tau", positive=True)  # logit temperature (exp/softmax attention)


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


def attention_output(attention: str, x, z):
    """``b`` of spec §1.1 as sympy expressions (tuple over tokens)."""
    if attention == "linear":
        return tuple(xi * zi for xi, zi in zip(x, z))
    e = tuple(xi * sp.exp(zi / tau) for xi, zi in zip(x, z))
    if attention == "exp":
        return e
    if attention == "softmax":
        A = sum(e)
        return tuple(ei / A for ei in e)
    raise ConfigError("attention", f"must be one of {ATTENTIONS}, got {attention!r}")


def per_sample_objective(attention: str, activation: str, Mc: int, K: int):
    """``(J, x, g)``: ``J = sum_k g_k phi(v_k . b(x, z) + s_k)`` for one sample (spec §2.1,
    Appendix); ``x`` (Mc symbols), ``g`` (K symbols)."""
    x = tuple(sp.Symbol(f"x_{l}", nonnegative=True) for l in range(1, Mc + 1))
    g = tuple(sp.Symbol(f"g_{k}", real=True) for k in range(1, K + 1))
    z, V, s = _z(Mc), _v(Mc, K), _s(K)
    b = attention_output(attention, x, z)
    phi = _phi(activation)
    J = sum(g[k] * phi(sum(V[k][l] * b[l] for l in range(Mc)) + s[k]) for k in range(K))
    return J, x, g


def per_sample_loss(attention: str, activation: str, Mc: int, K: int):
    """``(l, x, g)``: the loss of one data row, ``l = -J = -sum_k g_k phi(v_k . b(x, z) + s_k)``
    (spec §2.1; ``g = -dl/dh`` is the stationary back-propagated gradient of Assumption 1: the
    fixed-top network's loss for one row). The block ODE is the mean of its negative gradient over
    the rows (:func:`block_system`), its minibatch noise the covariance of that gradient."""
    J, x, g = per_sample_objective(attention, activation, Mc, K)
    return -J, x, g


def rows_distribution(N: int, Mc: int, K: int) -> Finite:
    """The data of the block as a distribution of the per-sample symbols ``(x, g)``: row ``n`` —
    ``x = x_n`` (the parameters ``x_n_l``), ``g = g_n`` (``g_n_k``) — with probability ``1/N``
    (a minibatch draws its rows independently and uniformly, with replacement)."""
    _, x, g = per_sample_objective("linear", "linear", Mc, K)
    X, G = _data_symbols(N, Mc, K)
    return Finite(tuple({**dict(zip(x, X[n])), **dict(zip(g, G[n]))} for n in range(N)),
                  tuple(sp.Rational(1, N) for _ in range(N)))


@lru_cache(maxsize=None)
def per_sample_flow(attention: str, activation: str, Mc: int, K: int):
    """Per-sample gradient-ascent directions ``dJ/d(state)`` in :func:`state_names` order, with the
    sample's symbols ``(x, g)``. Learning rate 1 for ``w`` and ``z`` (spec §2.1)."""
    J, x, g = per_sample_objective(attention, activation, Mc, K)
    state = (*_z(Mc), *(c for row in _v(Mc, K) for c in row), *_s(K))
    return tuple(sp.diff(J, c) for c in state), x, g, state


def _data_symbols(N, Mc, K):
    X = tuple(tuple(sp.Symbol(f"x_{n}_{l}", nonnegative=True) for l in range(1, Mc + 1)) for n in range(1, N + 1))
    G = tuple(tuple(sp.Symbol(f"g_{n}_{k}", real=True) for k in range(1, K + 1)) for n in range(1, N + 1))
    return X, G


def invariant_expressions(attention: str, Mc: int, K: int, bbar=None) -> dict[str, sp.Expr]:
    """Theorem 1 (spec §2.2), one expression per token ``l`` (constant along the flow):
    linear ``z_l^2 - sum_k v_kl^2``; exp ``z_l - sum_k v_kl^2/(2 tau)``; softmax (approximate)
    ``z_l - (sum_k v_kl^2 - bbar_l sum_k |v_k|^2)/(2 tau)``."""
    z, V = _z(Mc), _v(Mc, K)
    out = {}
    for l in range(Mc):
        sq = sum(V[k][l] ** 2 for k in range(K))
        if attention == "linear":
            out[f"invariant_{l + 1}"] = z[l] ** 2 - sq
        elif attention == "exp":
            out[f"invariant_{l + 1}"] = z[l] - sq / (2 * tau)
        else:
            bb = bbar[l] if bbar is not None else sp.Symbol(f"bbar_{l + 1}", positive=True)
            norms = sum(V[k][j] ** 2 for k in range(K) for j in range(Mc))
            out[f"invariant_{l + 1}"] = z[l] - (sq - bb * norms) / (2 * tau)
    return out


@lru_cache(maxsize=None)
def block_system(attention: str = "exp", activation: str = "linear", Mc: int = 3, K: int = 2,
                 N: int = 2) -> ReducedSystem:
    """The block flow (spec §2.1) for a data set of ``N`` token-frequency rows ``x_n`` with
    stationary gradients ``g_n``: ``d(state)/dt = (1/N) sum_n dJ_n/d(state)``.

    State ``z_l``, ``v_k_l``, ``s_k``; parameters ``x_n_l``, ``g_n_k`` (and ``tau`` for exp/softmax;
    ``bbar_l`` for the softmax invariant's observables). Time = learning rate x steps.

    ``noise``: the minibatch noise of :func:`per_sample_loss` over :func:`rows_distribution` (map
    ``P = 1``: the flow is ``-grad E l`` in ODE time ``t = lr*step``, so one step is ``dt = lr``),
    its covariance exact and left implicit in the ``N`` rows (the SDE's ``outcomes`` factor)."""
    if min(Mc, K, N) < 1:
        raise ConfigError("K" if K < 1 else ("Mc" if Mc < 1 else "N"), "must be >= 1")
    flow, x, g, state = per_sample_flow(attention, activation, Mc, K)
    X, G = _data_symbols(N, Mc, K)
    rhs = []
    for e in flow:
        total = 0
        for n in range(N):
            sub = {**dict(zip(x, X[n])), **dict(zip(g, G[n]))}
            total += e.xreplace(sub)
        rhs.append(total / N)
    rhs, definitions = _name_intermediates(attention, activation, rhs, X, Mc, K, N)
    params = tuple(c for row in X for c in row) + tuple(c for row in G for c in row)
    bbar = ()
    if attention in ("exp", "softmax"):
        params = params + (tau,)
    if attention == "softmax":
        bbar = tuple(sp.Symbol(f"bbar_{l}", positive=True) for l in range(1, Mc + 1))
        params = params + bbar
    inv = invariant_expressions(attention, Mc, K, bbar or None)
    obs = dict(inv)
    loss, x, g = per_sample_loss(attention, activation, Mc, K)
    noise = derive_noise(loss, state, (*x, *g), rows_distribution(N, Mc, K), preconditioner=1, simplify=False,
                         covariance=False,
                         description=(f"rows $n$ uniform over the {N} data rows $(x_n, g_n)$, minibatches of $B$ rows "
                                      r"with replacement; time = lr $\times$ step (one step: $\Delta\tau$ = lr); "
                                      r"$\mathrm{Cov}[g]$ exact, implicit in the rows"))
    return ReducedSystem(
        name=f"block_{attention}_{activation}",
        paper=PAPER,
        state=state,
        parameters=params,
        rhs=tuple(rhs), definitions=definitions, observables=obs, invariants=inv, noise=noise,
        spec=f"{SPEC} §2.1-2.2, §2.7 ({attention} attention, {activation} MLP, Mc={Mc}, K={K}, N={N})",
        description=("Gradient flow of one JoMA block (free attention logits z of the query over "
                     "contextual tokens, lower-MLP weights projected on the orthonormal embeddings) "
                     "under a stationary back-propagated gradient; derived from the per-sample "
                     r"objective $J = \sum_k g_k \phi(v_k \cdot b + s_k)$."),
    )


def _name_intermediates(attention, activation, rhs, X, Mc, K, N):
    """The paper's named quantities as definitions (spec §1.1): the softmax normaliser
    ``A_n = sum_l x_nl exp(z_l/tau)`` and, for a nonlinear ``phi``, the pre-activation
    ``u_n_k = v_k . b_n + s_k`` (``= w_k^T f_n``); the rhs is rewritten in terms of them (and equals
    the derived one once they are substituted back — checked here)."""
    z, V, s = _z(Mc), _v(Mc, K), _s(K)
    defs = []
    out = list(rhs)
    if attention == "softmax":
        for n in range(N):
            A = sp.Symbol(f"A_{n + 1}", positive=True)
            expr = sum(X[n][l] * sp.exp(z[l] / tau) for l in range(Mc))
            out = [e.subs(expr, A) for e in out]
            defs.append((A, expr))
    if activation != "linear":
        for n in range(N):
            Asym = defs[n][0] if attention == "softmax" else None
            b = attention_output(attention, X[n], z)
            if attention == "softmax":
                b = tuple(bi.subs(defs[n][1], Asym) for bi in b)
            for k in range(K):
                u = sp.Symbol(f"u_{n + 1}_{k + 1}", real=True)
                expr = sum(V[k][l] * b[l] for l in range(Mc)) + s[k]
                out = [e.subs(expr, u) for e in out]
                defs.append((u, expr))
    back = list(out)
    for sym, expr in reversed(defs):
        back = [e.xreplace({sym: expr}) for e in back]
    point = {c: sp.Rational(k % 7 + 1, 9) * (-1) ** k for k, c in enumerate(sorted(
        set().union(*(e.free_symbols for e in rhs)), key=str))}
    for e, want in zip(back, rhs):  # derivation guard: same value at a generic rational point
        if abs(sp.N((e - want).xreplace(point), 30)) > 1e-20:  # pragma: no cover
            raise RuntimeError("naming the intermediates changed the block flow")
    return out, tuple(defs)


def softmax_invariant_residual(Mc: int = 3, K: int = 2, N: int = 2, activation: str = "linear"):
    """Exact ``d/dt (zhat - z)`` (= ``-d/dt`` of the invariant expression) of the softmax block flow with constant ``bbar`` (spec §2.2): the
    term conditions (i)-(ii) neglect. Returns one expression per token (state and parameters of
    :func:`block_system`); its size measures how well the approximate invariant holds."""
    sysm = block_system("softmax", activation, Mc, K, N)
    return tuple(-sysm.time_derivative(e) for e in sysm.invariants.values())


# ------------------------------------------------------------------------------------------------
# Integrated-out MLP dynamics and Theorem 2 (spec §2.3-2.4)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def integrated_system(attention: str = "exp", activation: str = "linear", Mc: int = 3, K: int = 2,
                      N: int = 2) -> ReducedSystem:
    """MLP-only dynamics with attention integrated out (spec §2.3): the ``v``/``s`` rows of
    :func:`block_system` with ``z`` replaced by the Theorem-1 invariant solved for ``z`` (constant
    ``c_l`` as parameters; ``c = 0`` for zero init). Exact for exp attention; for softmax it uses
    the approximate invariant with constant ``bbar`` (conditions (i)-(ii)). Observables: the
    attention logits ``z_l`` implied by the invariant."""
    if attention not in ("exp", "softmax"):
        raise ConfigError("attention", "attention can be integrated out for exp or softmax "
                                       "(linear keeps a sign choice)")
    blk = block_system(attention, activation, Mc, K, N)
    z = _z(Mc)
    c = tuple(sp.Symbol(f"c_{l}", real=True) for l in range(1, Mc + 1))
    zsol = {}
    for l, expr in enumerate(blk.invariants.values()):
        (sol,) = sp.solve(sp.Eq(expr, c[l]), z[l])  # the invariants are linear in z_l
        zsol[z[l]] = sol
    keep = [i for i, st in enumerate(blk.state) if st not in set(z)]
    state = tuple(blk.state[i] for i in keep)
    rhs = tuple(blk.expanded_rhs[i].xreplace(zsol) for i in keep)
    params = tuple(blk.parameters) + c
    return ReducedSystem(
        name=f"integrated_{attention}_{activation}", paper=PAPER, state=state, parameters=params, rhs=rhs,
        observables={str(zl): zsol[zl] for zl in z},
        spec=f"{SPEC} §2.3 (attention integrated out, {attention}, {activation} MLP, Mc={Mc}, K={K}, N={N})",
        description=(r"$\dot{v}_k = E[g_k h'_k\, x \circ \exp(z/\tau)]/A$ with $z = \frac{1}{2\tau} \sum_s v_s^2$ "
                     r"(+ a $\bar{b}$ term for softmax) + $c$."),
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
                    r"at $t^*_l = \sqrt{\pi/2}/|\Delta_l|$; the most salient component first.",
    )


def theorem2_closed_form(Delta, t):
    """``v(t) = sqrt(2) erfinv(sqrt(2/pi) Delta t)`` for ``v(0) = 0`` (spec §2.4)."""
    return sp.sqrt(2) * sp.erfinv(sp.sqrt(2 / sp.pi) * Delta * t)


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
        description=r"Components converge to $\mu_j$ at local rate $\exp(\mu_j^2/2)$; entropy drops then bounces.",
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

