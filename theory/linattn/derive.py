"""linattn derivation: the population loss from the data model -> gradient flows (docs/papers/linattn.md §3).

Nothing here is typed from the paper:

1. :func:`population_loss` — ``(1/2) E[(y_q - c^T Γ x_q)^2]`` as the expectation of a polynomial in independent
   centred Gaussians (``x``, a second context sample ``x'``, ``x_q`` with variances ``λ_i``; ``w`` with
   variance ``1/D``), by Isserlis' moments ``E[g^k] = (k-1)!! σ^k`` (:func:`gaussian_expectation`). The context
   average ``c = (1/N) sum_n y_n x_n`` enters through one sample (the linear term), and its second moment as
   ``(1/N)`` same-sample plus ``(1 - 1/N)`` two-sample terms: exact for every ``N`` (symbolic).
2. The gradient flows ``dθ/dt = -∂L(Γ(θ))/∂θ`` by the chain rule through ``γ_i = e_i^T Γ e_i`` on the invariant
   diagonal set (spec §3): merged (:func:`merged_system`) and separate (:func:`separate_system`) heads.
3. The reductions: balanced aligned separate heads -> one scalar ODE per principal component
   (:func:`component_system`); the merged isotropic class -> a logistic with its closed form
   (:func:`isotropic_system`).
4. Fixed points and plateau levels (:func:`optimum`, :func:`plateau_levels`).

Sizes (``D``, ``H``, ``R``) are concrete; eigenvalues ``lam_i`` and the context length ``N`` stay symbolic.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from ..core import TIME, ReducedSystem
from ..errors import ConfigError
from .config import PAPER, SPEC, LinAttnConfig

__all__ = [
    "gaussian_expectation", "population_loss", "lam_symbols", "gamma_symbols", "Nc",
    "merged_system", "separate_system", "component_system", "isotropic_system", "systems",
    "optimum", "plateau_levels", "assignment",
]

#: the context length (symbolic everywhere)
Nc = sp.Symbol("N", positive=True)


def lam_symbols(D: int) -> tuple[sp.Symbol, ...]:
    """The covariance eigenvalues ``lam_1 .. lam_D``."""
    return sp.symbols(f"lam_1:{D + 1}", positive=True)


def gamma_symbols(D: int) -> tuple[sp.Symbol, ...]:
    """The model's projections ``gamma_i = e_i^T Γ e_i`` (spec §4)."""
    return sp.symbols(f"gamma_1:{D + 1}", real=True)


def _double_factorial_moment(k: int, var: sp.Expr) -> sp.Expr:
    if k % 2:
        return sp.Integer(0)
    return sp.factorial2(k - 1) * var ** (k // 2) if k else sp.Integer(1)


def gaussian_expectation(poly: sp.Poly, variances: dict[sp.Symbol, sp.Expr]) -> sp.Expr:
    """``E[poly]`` for independent centred Gaussian generators with the given variances (Isserlis).

    ``poly``: a :class:`sympy.Poly` whose generators are keys of ``variances`` (coefficients may hold other
    symbols). Each monomial ``prod g^k`` has expectation ``prod (k-1)!! var^(k/2)`` (zero if any ``k`` is odd).
    """
    gens = poly.gens
    out = sp.Integer(0)
    for exps, coeff in poly.terms():
        if any(k % 2 for k in exps):
            continue
        term = coeff
        for g, k in zip(gens, exps):
            term *= _double_factorial_moment(k, variances[g])
        out += term
    return out


@lru_cache(maxsize=None)
def population_loss(D: int, diagonal: bool = True) -> sp.Expr:
    """The population loss ``L(Γ)`` (spec §3) from the data model, in ``gamma_i`` (``diagonal``) or in the
    entries ``G_i_j`` of a full ``Γ`` (symbols ``G_1_1 ...``)."""
    if D < 1:
        raise ConfigError("D", f"must be >= 1, got {D}")
    lam = lam_symbols(D)
    x = sp.symbols(f"x_1:{D + 1}", real=True)     # one context sample
    xp = sp.symbols(f"xp_1:{D + 1}", real=True)   # an independent context sample, same task
    xq = sp.symbols(f"xq_1:{D + 1}", real=True)   # the query
    w = sp.symbols(f"w_1:{D + 1}", real=True)     # the task
    if diagonal:
        G = sp.diag(*gamma_symbols(D))
    else:
        G = sp.Matrix(D, D, lambda i, j: sp.Symbol(f"G_{i + 1}_{j + 1}", real=True))
    gens = (*x, *xp, *xq, *w)
    variances = {**dict(zip(x, lam)), **dict(zip(xp, lam)), **dict(zip(xq, lam)),
                 **{wi: sp.Rational(1, D) for wi in w}}

    def P(expr):
        return sp.Poly(expr, *gens)

    def label(sample):
        return sum((P(wi) * P(si) for wi, si in zip(w, sample)), P(0))

    y, yp, yq = label(x), label(xp), label(xq)
    q = [sum((P(G[i, j]) * P(xq[j]) for j in range(D)), P(0)) for i in range(D)]  # Γ x_q
    pred = sum((y * P(x[i]) * q[i] for i in range(D)), P(0))     # (y x)^T Γ x_q: one-sample c
    pred_p = sum((yp * P(xp[i]) * q[i] for i in range(D)), P(0))
    E = lambda poly: gaussian_expectation(poly, variances)  # noqa: E731
    loss = (E(yq * yq) - 2 * E(pred * yq) + E(pred * pred) / Nc + (1 - 1 / Nc) * E(pred * pred_p)) / 2
    return sp.expand(loss)


def optimum(D: int) -> tuple[sp.Expr, ...]:
    """The minimiser ``gamma_i*`` of the derived loss (spec §3), solved by sympy."""
    L, g = population_loss(D), gamma_symbols(D)
    return tuple(sp.factor(sp.solve(sp.diff(L, gi), gi)[0]) for gi in g)


def plateau_levels(D: int) -> tuple[sp.Expr, ...]:
    """``L_k``, ``k = 0..D``: the loss with the first ``k`` components at their optimum and the rest at zero
    (the separate flow's saddles in eigenvalue order, spec §3.2)."""
    L, g, opt = population_loss(D), gamma_symbols(D), optimum(D)
    return tuple(L.xreplace({gi: (opt[i] if i < k else 0) for i, gi in enumerate(g)})
                 for k in range(D + 1))


def assignment(D: int, H: int, R: int) -> list[list[int]]:
    """Component of row ``r`` of head ``h``: ``(h R + r) mod D`` (spec §6.6)."""
    return [[(h * R + r) % D for r in range(R)] for h in range(H)]


def _flow(name, D, params_of, gamma_of, description, observables_extra=None) -> ReducedSystem:
    """The gradient flow ``-∂L(γ(θ))/∂θ`` by the chain rule through the definitions ``gamma_i`` (the model's
    projections) and ``g_i = ∂L/∂gamma_i``."""
    lam, gam = lam_symbols(D), gamma_symbols(D)
    gsym = sp.symbols(f"g_1:{D + 1}", real=True)
    L = population_loss(D)
    grads = [sp.factor(sp.diff(L, gi)) for gi in gam]
    rhs = [sp.expand(-sum(sp.diff(gamma_of[i], th) * gsym[i] for i in range(D))) for th in params_of]
    observables = {"loss": L, **{f"gamma_{i + 1}": gam[i] for i in range(D)}, **(observables_extra or {})}
    return ReducedSystem(
        name=name, paper=PAPER, state=tuple(params_of), parameters=(*lam, Nc), rhs=tuple(rhs),
        definitions=(*zip(gam, gamma_of), *zip(gsym, grads)), observables=observables, spec=SPEC,
        description=description)


def merged_system(D: int, H: int) -> ReducedSystem:
    """ATTN_M on the diagonal set (spec §3.1): ``gamma_i = sum_h v_h u_{h,i}``."""
    v = sp.symbols(f"v_1:{H + 1}", real=True)
    u = [[sp.Symbol(f"u_{h + 1}_{i + 1}", real=True) for i in range(D)] for h in range(H)]
    gamma = [sum(v[h] * u[h][i] for h in range(H)) for i in range(D)]
    state = [s for h in range(H) for s in (v[h], *u[h])]
    return _flow("merged", D, state, gamma, f"merged key-query, {H} head(s), diagonal U_h (spec §3.1)")


def separate_system(D: int, H: int, R: int = 1) -> ReducedSystem:
    """ATTN_S on the aligned set (spec §3.2, §6.6): head ``h`` row ``r`` on component
    :func:`assignment`, ``k_{h,r} = a_{h,r} e_i``, ``q_{h,r} = b_{h,r} e_i``."""
    comp = assignment(D, H, R)
    v = sp.symbols(f"v_1:{H + 1}", real=True)
    a = [[sp.Symbol(f"a_{h + 1}_{r + 1}", real=True) for r in range(R)] for h in range(H)]
    b = [[sp.Symbol(f"b_{h + 1}_{r + 1}", real=True) for r in range(R)] for h in range(H)]
    gamma = [sp.Integer(0)] * D
    for h in range(H):
        for r in range(R):
            gamma[comp[h][r]] += v[h] * a[h][r] * b[h][r]
    state = [s for h in range(H) for s in (v[h], *a[h], *b[h])]
    return _flow("separate", D, state, gamma, f"separate key and query, {H} head(s) of rank {R} (spec §3.2)")


def component_system(D: int) -> ReducedSystem:
    """The scalar ODE per principal component (spec §3.2): the separate flow with ``H = D`` rank-one heads,
    restricted to the balanced set ``v_h = a_h = b_h = s_h`` (invariant: the three right-hand sides agree
    there, checked here)."""
    full = separate_system(D, D, 1)
    s = sp.symbols(f"s_1:{D + 1}", real=True)
    balanced = {}
    for h in range(D):
        for p in "vab":
            balanced[sp.Symbol(f"{p}_{h + 1}" + ("" if p == "v" else "_1"), real=True)] = s[h]
    rhs = []
    for h in range(D):
        vab = [sp.Symbol(f"{p}_{h + 1}" + ("" if p == "v" else "_1"), real=True) for p in "vab"]
        exprs = [sp.expand(full.expand_definitions(full.rhs_dict[x]).xreplace(balanced)) for x in vab]
        if any(sp.expand(e - exprs[0]) != 0 for e in exprs[1:]):
            raise AssertionError("the balanced set is not invariant")  # pragma: no cover - a derivation defect
        rhs.append(sp.factor(exprs[0]))
    lam, gam = lam_symbols(D), gamma_symbols(D)
    L = population_loss(D).xreplace({gam[i]: s[i] ** 3 for i in range(D)})
    obs = {"loss": L, **{f"gamma_{i + 1}": s[i] ** 3 for i in range(D)}}
    opt = optimum(D)
    # leading-order escape time of component i from s_i(0) = epsilon: ds/dt ~ (dL/dgamma at 0) s^2 blows up
    s0 = sp.Symbol("epsilon", positive=True)  # s_i(0): the initial scale (not s_0: the states are s_i)
    escape = {f"escape_{i + 1}": sp.simplify(1 / (s0 * sp.diff(population_loss(D), gam[i]).subs(
        {g: 0 for g in gam}) * -1)) for i in range(D)}
    closed = {**escape, **{f"gamma_star_{i + 1}": opt[i] for i in range(D)}}
    return ReducedSystem(name="component", paper=PAPER, state=s, parameters=(*lam, Nc, s0), rhs=tuple(rhs),
                         observables=obs, closed_forms=closed, spec=SPEC,
                         description="one scalar ODE per principal component: balanced rank-one heads (spec §3.2)")


def isotropic_system(D: int) -> ReducedSystem:
    """The merged flow's analytic class (spec §3.1): ``Λ = lam I``, one head, ``U = u I``, ``v = sqrt(D) u``.
    ``gamma = v u`` obeys a logistic ``dgamma/dt = r gamma (1 - gamma/gamma*)`` (its rate and plateau read off
    the derived right-hand side); the closed form is checked to solve it."""
    full = merged_system(D, 1)
    lamI, u, g = sp.Symbol("lam", positive=True), sp.Symbol("u", positive=True), sp.Symbol("gamma", positive=True)
    on = {sp.Symbol("v_1", real=True): sp.sqrt(D) * u,
          **{sp.Symbol(f"u_1_{i + 1}", real=True): u for i in range(D)},
          **{li: lamI for li in lam_symbols(D)}}
    rhs = {x: full.expand_definitions(f).xreplace(on) for x, f in full.rhs_dict.items()}
    gamma_of = sp.sqrt(D) * u ** 2                       # gamma_i = v u for every i
    dgamma = sp.diff(gamma_of, u) * rhs[sp.Symbol("u_1_1", real=True)]
    # consistency of the ansatz: dv/dt = sqrt(D) du/dt keeps v = sqrt(D) u
    if sp.simplify(rhs[sp.Symbol("v_1", real=True)] - sp.sqrt(D) * rhs[sp.Symbol("u_1_1", real=True)]) != 0:
        raise AssertionError("the balanced aligned set is not invariant")  # pragma: no cover
    flow = sp.expand(dgamma.xreplace({u: sp.sqrt(g / sp.sqrt(D))}))
    poly = sp.Poly(flow, g)
    if poly.degree() != 2 or poly.coeff_monomial(1) != 0:
        raise AssertionError("not a logistic")  # pragma: no cover
    r = sp.simplify(poly.coeff_monomial(g))
    gstar = sp.simplify(-r / poly.coeff_monomial(g ** 2))
    g0 = sp.Symbol("epsilon_gamma", positive=True)  # gamma(0), the initial value
    closed = gstar / (1 + (gstar / g0 - 1) * sp.exp(-r * TIME))
    if sp.simplify(sp.diff(closed, TIME) - flow.xreplace({g: closed})) != 0:
        raise AssertionError("the closed form does not solve the flow")  # pragma: no cover
    L = population_loss(D).xreplace({**{gi: g for gi in gamma_symbols(D)}, **{li: lamI for li in lam_symbols(D)}})
    return ReducedSystem(
        name="isotropic", paper=PAPER, state=(g,), parameters=(lamI, Nc, g0), rhs=(flow,),
        observables={"loss": sp.expand(L)},
        closed_forms={"gamma": closed, "loss": sp.expand(L).xreplace({g: closed}), "rate": r, "gamma_star": gstar,
                      "drop_time": sp.log(gstar / g0) / r},
        spec=SPEC, description="merged key-query, isotropic data, balanced aligned start: a logistic (spec §3.1)")


def systems(config: LinAttnConfig | None = None) -> list[ReducedSystem]:
    """What ``tdyn derive linattn`` prints: the merged and separate flows for the config's sizes, the scalar
    per-component ODEs and the merged isotropic logistic."""
    c = config or LinAttnConfig()
    return [merged_system(c.D, c.H), separate_system(c.D, c.H, c.R), component_system(c.D), isotropic_system(c.D)]
