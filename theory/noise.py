"""Minibatch noise derived from a paper's per-sample loss: ``ℓ(θ; x)`` → ``g(θ; x)`` →
drift check ``E_x[g] = rhs`` → ``Cov_x[g]`` → the SDE's diffusion.

A paper states, in sympy, its per-sample loss ``ℓ(θ; x)`` (the expression its drift is derived
from), the sample symbols ``x`` and their distribution, and the map its flow uses
(``rhs = -P ∇_θ E_x[ℓ]``: ``P`` the learning rate(s) and preconditioner, in the system's time
unit). :func:`derive_noise` then forms

* the per-sample flow ``g(θ; x) = -P ∇_θ ℓ(θ; x)`` (the "per-sample gradient" with the flow's map;
  its mean is the drift), shape ``(d,)`` over the state coordinates ``θ``;
* ``E_x[g]`` and the per-sample covariance ``Cov_x[g]`` (a ``d x d`` sympy Matrix) — exactly where
  the distribution is finite or has closed-form moments, to first order (delta method) when asked,
  and not at all for a Monte-Carlo sampler (the SDE then estimates it per step). The
  :class:`Noise` says which (``method``, ``exact``).

:func:`check_drift` holds ``E_x[g]`` against the system's derived ``rhs`` (symbolically, else at
random points to 1e-10; within Monte-Carlo error for a sampler).

**Time scaling** (the one place it is decided). One optimiser step with learning rate ``lr`` moves
``θ`` by ``-lr P_opt ∇ℓ_B`` (``ℓ_B`` the mean over a minibatch of ``B`` independent samples). The
system's time advances by ``Δτ = config.ode_time(1) - config.ode_time(0)`` per step
(:func:`step_time`: read from the paper's own ``ode_time``, never assumed), and the flow is the
mean step per unit time, so the step is ``Δτ g_B``. Its covariance is ``Δτ² Cov_x[g]/B``
(``= lr² Cov_x[P_opt ∇ℓ]/B``), accumulated over ``1/Δτ`` steps per unit of ODE time: the SDE is

    dθ = rhs(θ) dt + sqrt(Δτ Σ(θ)) dW,      Σ(θ) = Cov_x[g(θ; x)] / B,

in the paper's time unit. Examples: time = steps and ``rhs = lr (...)`` (SCB, topic, the tiny
paper): ``Δτ = 1``, ``g`` carries ``lr``, diffusion covariance ``lr² Cov[∇ℓ]/B``; time = ``lr·step``
and ``rhs`` free of ``lr`` (JoMA): ``Δτ = lr``, diffusion covariance ``lr Cov[∇ℓ]/B``; momentum
``μ`` with time ``step/(1-μ)`` (Scan & Snap): ``Δτ = 1/(1-μ)`` (the slow-momentum limit, where
each sample's gradient eventually moves ``θ`` by ``lr/(1-μ)`` times itself).

Distributions (each has ``symbols``, ``expect(expr)`` and ``moments(g)``; combine freely):

* :class:`Finite` — outcomes with (possibly symbolic) probabilities; exact. For a large state its
  ``d x d`` covariance can be left implicit (``derive_noise(..., covariance=False)``): it is then
  ``Σ_k p_k (g_k - E g)(g_k - E g)ᵀ`` over the outcomes, which the SDE's ``"outcomes"`` factor
  realises exactly without forming ``d²`` entries.
* :class:`Moments` — a closed-form moment generating function (``gaussian``, ``multinomial``); exact
  for ``g`` polynomial in the sample symbols (every moment is a derivative of the MGF); ``linearize``
  gives the delta method (``E g ≈ g(E x)``, ``Cov g ≈ J Cov(x) Jᵀ``, not exact).
* :class:`Independent` — independent parts (e.g. a Bernoulli label and Gaussian features).
* :class:`Mixture` — a finite mixture (e.g. a class ``n`` then counts drawn given ``n``).
* :class:`MonteCarlo` — a jax sampler ``sampler(key, n, p) -> {name: (n,) array}``; the SDE draws
  fresh samples per step (``Noise.covariance is None``).

Everything here is float64 sympy; numeric callables are made by ``theory.noise_sde``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import sympy as sp

from .numeric import compile_expressions, enable_x64
from .errors import ConfigError

__all__ = [
    "Noise", "Finite", "Moments", "Independent", "Mixture", "MonteCarlo", "Distribution",
    "derive_noise", "expectation", "check_drift", "DriftCheck", "step_time", "step_plan", "BATCH", "law_sampler",
    "covariance_at",
]

#: the default batch-size symbol (``Σ = Cov_x[g] / B``)
BATCH = sp.Symbol("B", positive=True, integer=True)

#: entries larger than this (sympy ``count_ops``) are not passed to ``sp.simplify`` (too slow)
SIMPLIFY_MAX_OPS = 400


class Distribution(Protocol):
    """What :func:`derive_noise` needs of a data distribution."""

    kind: str
    exact: bool

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]: ...

    def expect(self, expr: sp.Expr) -> sp.Expr: ...

    def moments(self, g: Sequence[sp.Expr], linearize: bool = False) -> tuple[list[sp.Expr], sp.Matrix]: ...


def _second(self, g, linearize=False):
    """Default ``moments``: ``(E[g_i], E[g_i g_j])`` by :meth:`expect`."""
    if linearize:
        raise ConfigError("linearize", f"the delta method applies to Moments distributions, not {self.kind}")
    n = len(g)
    mean = [self.expect(e) for e in g]
    S = sp.zeros(n, n)
    for i in range(n):
        for j in range(i, n):
            S[i, j] = S[j, i] = self.expect(g[i] * g[j])
    return mean, S


# ------------------------------------------------------------------------------------------------
# Distributions
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Finite:
    """Finitely many outcomes: ``outcomes[k]`` assigns a value to every sample symbol,
    ``probabilities[k]`` its probability (sympy expressions in the system's parameters allowed;
    they must sum to 1). Expectations are exact sums."""

    outcomes: tuple[Mapping[sp.Symbol, Any], ...]
    probabilities: tuple[Any, ...]
    kind = "finite"
    exact = True

    def __post_init__(self):
        outs = tuple({s: sp.sympify(v) for s, v in o.items()} for o in self.outcomes)
        probs = tuple(sp.sympify(p) for p in self.probabilities)
        object.__setattr__(self, "outcomes", outs)
        object.__setattr__(self, "probabilities", probs)
        if not outs or len(outs) != len(probs):
            raise ValueError(f"Finite: {len(outs)} outcomes for {len(probs)} probabilities")
        keys = [set(o) for o in outs]
        if any(k != keys[0] for k in keys):
            raise ValueError("Finite: every outcome must assign the same sample symbols")
        total = sp.simplify(sum(probs) - 1)
        if total != 0:
            raise ValueError(f"Finite: probabilities sum to 1 + ({total})")

    @classmethod
    def bernoulli(cls, x: sp.Symbol, p) -> "Finite":
        """``x = 1`` with probability ``p``, else ``0``."""
        return cls(({x: 1}, {x: 0}), (p, 1 - sp.sympify(p)))

    @classmethod
    def categorical(cls, x: sp.Symbol, values: Sequence, probabilities: Sequence) -> "Finite":
        return cls(tuple({x: v} for v in values), tuple(probabilities))

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return tuple(sorted(self.outcomes[0], key=str))

    def expect(self, expr):
        expr = sp.sympify(expr)
        return sp.Add(*[p * expr.xreplace(o) for p, o in zip(self.probabilities, self.outcomes)])

    moments = _second


@dataclass(frozen=True, eq=False)
class Moments:
    """A distribution given by its closed-form moment generating function
    ``M(t) = E exp(Σ_i t_i x_i)`` in ``dummies`` (one per variable): ``E[x^α] = ∂^α M(0)``.
    Exact for expressions polynomial in the variables; :meth:`moments` with ``linearize=True``
    applies the delta method instead (first-order Taylor of ``g`` about ``E x``; not exact)."""

    variables: tuple[sp.Symbol, ...]
    mgf: sp.Expr
    dummies: tuple[sp.Symbol, ...]
    description: str = ""
    ref: str = ""  # optional "module:function" sampler drawing this law (:func:`law_sampler`)
    simplify: bool = True  # sp.simplify each moment (False: as differentiated, for long symbolic laws)
    kind = "moments"
    exact = True

    def __post_init__(self):
        object.__setattr__(self, "variables", tuple(self.variables))
        object.__setattr__(self, "dummies", tuple(self.dummies))
        object.__setattr__(self, "mgf", sp.sympify(self.mgf))
        object.__setattr__(self, "_cache", {})
        if len(self.variables) != len(self.dummies):
            raise ValueError("Moments: one dummy per variable")

    @staticmethod
    def _dummies(variables) -> tuple[sp.Symbol, ...]:
        return tuple(sp.Symbol(f"mgf_{v}", real=True) for v in variables)

    @classmethod
    def gaussian(cls, variables: Sequence[sp.Symbol], mean: Sequence | None = None, cov=None) -> "Moments":
        """``x ~ N(mean, cov)`` (defaults: 0 and the identity); ``cov`` a matrix or the variances."""
        variables = tuple(variables)
        n = len(variables)
        m = sp.Matrix(list(mean) if mean is not None else [0] * n)
        C = sp.eye(n) if cov is None else (sp.diag(*cov) if not isinstance(cov, sp.MatrixBase) else sp.Matrix(cov))
        t = sp.Matrix(cls._dummies(variables))
        mgf = sp.exp((m.T * t)[0] + (t.T * C * t)[0] / 2)
        return cls(variables, mgf, tuple(t), "gaussian")

    @classmethod
    def multinomial(cls, variables: Sequence[sp.Symbol], n, p: Sequence, scale=1) -> "Moments":
        """``x = scale * c`` with counts ``c ~ Multinomial(n, p)`` (e.g. ``scale = 1/n``: the
        empirical frequencies; then ``E x = p``, ``Cov x = (diag p - p pᵀ)/n``)."""
        variables = tuple(variables)
        t = cls._dummies(variables)
        mgf = sp.Add(*[sp.sympify(pi) * sp.exp(sp.sympify(scale) * ti) for pi, ti in zip(p, t)]) ** sp.sympify(n)
        return cls(variables, mgf, t, "multinomial")

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return self.variables

    def moment(self, alpha: tuple[int, ...]) -> sp.Expr:
        """``E[Π x_i^{α_i}]`` (cached; ``E[1] = 1``, whatever form the MGF's normalisation takes)."""
        cache = self._cache
        if not any(alpha):
            return sp.S.One
        if alpha not in cache:
            d = self.mgf
            for ti, k in zip(self.dummies, alpha):
                if k:
                    d = sp.diff(d, ti, k)
            d = d.xreplace({ti: 0 for ti in self.dummies})
            cache[alpha] = sp.simplify(d) if self.simplify else d
        return cache[alpha]

    def mean(self) -> list[sp.Expr]:
        n = len(self.variables)
        return [self.moment(tuple(int(i == j) for j in range(n))) for i in range(n)]

    def covariance(self) -> sp.Matrix:
        n, m = len(self.variables), self.mean()
        return sp.Matrix(n, n, lambda i, j: self.moment(tuple(int(i == k) + int(j == k) for k in range(n))) - m[i] * m[j])

    def expect(self, expr):
        return sp.Add(*[c * self.moment(a) for a, c in self.coefficients(expr).items()])

    def linearized(self, g: Sequence[sp.Expr]) -> list[sp.Expr]:
        """First-order Taylor polynomials of ``g`` in the variables about their mean."""
        at = dict(zip(self.variables, self.mean()))
        out = []
        for e in g:
            e = sp.sympify(e)
            lin = e.xreplace(at) + sum(sp.diff(e, v).xreplace(at) * (v - at[v]) for v in self.variables)
            out.append(lin)
        return out

    def coefficients(self, expr) -> dict[tuple[int, ...], sp.Expr]:
        """``expr`` as a polynomial in the variables: exponent tuple -> coefficient (anything free
        of the variables), from its expansion term by term (each coefficient summed once: linear in
        the number of terms, where ``sp.Poly`` re-adds long coefficient sums). :class:`ConfigError`
        when it is not polynomial in them."""
        expr = sp.sympify(expr)
        variables = set(self.variables)
        if not expr.free_symbols & variables:
            return {(0,) * len(self.variables): expr}
        index = {v: i for i, v in enumerate(self.variables)}
        groups: dict[tuple[int, ...], list] = {}
        for term in sp.Add.make_args(sp.expand(expr)):
            alpha, rest = [0] * len(index), []
            for factor in sp.Mul.make_args(term):
                base, exp = factor.as_base_exp()
                if base in index and exp.is_Integer and exp >= 0:
                    alpha[index[base]] += int(exp)
                elif factor.free_symbols & variables:
                    raise ConfigError("distribution", f"Moments: {expr} is not polynomial in {self.variables}; use "
                                                      "derive_noise(..., linearize=True) (delta method) or a "
                                                      "MonteCarlo sampler")
                else:
                    rest.append(factor)
            groups.setdefault(tuple(alpha), []).append(sp.Mul(*rest))
        return {a: sp.Add(*c) for a, c in groups.items()}

    def moments(self, g, linearize=False):
        """``(E[g_i], E[g_i g_j])`` from each ``g_i``'s polynomial coefficients (one decomposition
        per ``g_i``, then ``E[g_i g_j] = Σ c_iα c_jβ E[x^(α+β)]``: no product is expanded, so a
        ``g`` whose coefficients are long expressions in the state stays cheap)."""
        if linearize:
            g = self.linearized(g)
        coef = [self.coefficients(e) for e in g]
        n = len(g)
        mean = [sp.Add(*[c * self.moment(a) for a, c in ci.items()]) for ci in coef]
        S = sp.zeros(n, n)
        for i in range(n):
            for j in range(i, n):
                S[i, j] = S[j, i] = sp.Add(*[ca * cb * self.moment(tuple(x + y for x, y in zip(a, b)))
                                             for a, ca in coef[i].items() for b, cb in coef[j].items()])
        return mean, S


@dataclass(frozen=True, eq=False)
class Independent:
    """Independent parts with disjoint symbols: ``E = E_1 E_2 ... E_n`` (the last part innermost;
    ``linearize`` applies to it alone). ``ref``: an optional ``"module:function"`` sampler drawing
    the whole law (:func:`law_sampler`)."""

    parts: tuple[Any, ...]
    ref: str = ""
    kind = "independent"

    def __post_init__(self):
        object.__setattr__(self, "parts", tuple(self.parts))
        seen: set = set()
        for p in self.parts:
            if isinstance(p, MonteCarlo):
                raise ValueError("Independent: a MonteCarlo sampler must cover the whole distribution")
            if seen & set(p.symbols):
                raise ValueError("Independent: parts must have disjoint symbols")
            seen |= set(p.symbols)

    @property
    def exact(self) -> bool:
        return all(p.exact for p in self.parts)

    @property
    def symbols(self):
        return tuple(s for p in self.parts for s in p.symbols)

    def expect(self, expr):
        for p in reversed(self.parts):
            expr = p.expect(expr)
        return expr

    def moments(self, g, linearize=False):
        mean, S = self.parts[-1].moments(g, linearize)
        for p in reversed(self.parts[:-1]):
            mean = [p.expect(e) for e in mean]
            S = S.applyfunc(p.expect)
        return mean, S


@dataclass(frozen=True, eq=False)
class Mixture:
    """``weights[k]`` times ``components[k]`` (distributions over the same symbols); weights sum to 1."""

    weights: tuple[Any, ...]
    components: tuple[Any, ...]
    kind = "mixture"

    def __post_init__(self):
        object.__setattr__(self, "weights", tuple(sp.sympify(w) for w in self.weights))
        object.__setattr__(self, "components", tuple(self.components))
        if len(self.weights) != len(self.components) or not self.weights:
            raise ValueError("Mixture: one weight per component")
        if any(set(c.symbols) != set(self.components[0].symbols) for c in self.components):
            raise ValueError("Mixture: components must cover the same symbols")
        if sp.simplify(sum(self.weights) - 1) != 0:
            raise ValueError("Mixture: weights must sum to 1")

    @property
    def exact(self) -> bool:
        return all(c.exact for c in self.components)

    @property
    def symbols(self):
        return self.components[0].symbols

    def expect(self, expr):
        return sp.Add(*[w * c.expect(expr) for w, c in zip(self.weights, self.components)])

    def moments(self, g, linearize=False):
        n = len(g)
        mean, S = [sp.S.Zero] * n, sp.zeros(n, n)
        for w, c in zip(self.weights, self.components):
            m, s = c.moments(g, linearize)
            mean = [a + w * b for a, b in zip(mean, m)]
            S += w * s
        return mean, S


@dataclass(frozen=True, eq=False)
class MonteCarlo:
    """A sampler of the sample symbols, for distributions with no closed form.

    ``sampler(key, n, p) -> {name: array (n,)}``: jax-traceable (``jax.random`` with ``key``), ``p``
    the system's parameter vector (``system.parameter_names`` order). ``ref`` (``"module:function"``)
    lets :func:`theory.load_system` re-import it; a sampler loaded without one cannot be drawn."""

    variables: tuple[sp.Symbol, ...]
    sampler: Callable | None = None
    ref: str = ""
    description: str = ""
    kind = "monte_carlo"
    exact = False

    def __post_init__(self):
        object.__setattr__(self, "variables", tuple(self.variables))
        if self.sampler is None and not self.ref:
            raise ValueError("MonteCarlo: give a sampler or its 'module:function' reference")

    @property
    def symbols(self):
        return self.variables

    def draw(self) -> Callable:
        """The sampler (imported from ``ref`` when it was loaded from JSON)."""
        if self.sampler is not None:
            return self.sampler
        from .refs import resolve_ref

        return resolve_ref(self.ref, "sampler")

    def expect(self, expr):
        raise ConfigError("distribution", "a MonteCarlo distribution has no symbolic expectation")

    def moments(self, g, linearize=False):
        raise ConfigError("distribution", "a MonteCarlo distribution has no symbolic moments")


# ------------------------------------------------------------------------------------------------
# Noise
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Noise:
    """The minibatch noise of a :class:`~theory.core.ReducedSystem` (its ``noise`` field).

    per_sample_loss: ``ℓ(θ; x)``.
    state:           the coordinates ``θ`` (the system's ``state``, same order).
    samples:         the sample symbols ``x``.
    distribution:    their law (:class:`Finite`, :class:`Moments`, :class:`Independent`,
                     :class:`Mixture`, :class:`MonteCarlo`).
    preconditioner:  the flow's map ``P`` (``rhs = -P ∇E ℓ``) as a Matrix: ``(1, 1)`` a scalar,
                     ``(d, 1)`` a diagonal, ``(d, d)`` a full matrix.
    gradient:        the per-sample flow ``g = -P ∇_θ ℓ`` (``d`` expressions).
    mean:            ``E_x[g]`` (``None`` for a sampler).
    covariance:      ``Cov_x[g]`` per sample, a ``d x d`` Matrix (``None`` for a sampler: the SDE
                     estimates it per step from fresh samples; ``None`` for an exact noise derived
                     with ``covariance=False``: implicit and exact — ``Σ_k p_k (g_k - E g)
                     (g_k - E g)ᵀ`` over a :class:`Finite` law's outcomes, or ``E[g gᵀ] - E g E gᵀ``
                     from a closed-form law's moments; :attr:`implicit_covariance`,
                     :func:`covariance_at`).
    exact:           whether ``mean``/``covariance`` are exact (finite or closed-form moments).
    method:          ``"finite"``, ``"moments"``, ``"delta"`` (first-order) or ``"monte_carlo"``.
    batch_symbol:    ``B`` in ``Σ(θ) = Cov_x[g]/B`` (:attr:`sigma`).
    description:     one line for humans.

    The SDE per unit of the system's time is ``dθ = rhs dt + sqrt(Δτ Σ) dW`` with ``Δτ`` the ODE
    time of one optimiser step (:func:`step_time`; module docstring)."""

    per_sample_loss: sp.Expr
    state: tuple[sp.Symbol, ...]
    samples: tuple[sp.Symbol, ...]
    distribution: Any
    preconditioner: sp.Matrix
    gradient: tuple[sp.Expr, ...]
    mean: tuple[sp.Expr, ...] | None
    covariance: sp.Matrix | None
    exact: bool
    method: str
    batch_symbol: sp.Symbol = BATCH
    description: str = ""

    @property
    def implicit_covariance(self) -> bool:
        """Whether ``Cov_x[g]`` is exact but left implicit (``derive_noise(..., covariance=False)``):
        in the outcomes of a :class:`Finite` law, or in the closed-form moments of any other exact
        law (``E[g gᵀ] - E g E gᵀ`` with ``g`` polynomial in the samples); :func:`covariance_at`
        evaluates it at a point."""
        return self.covariance is None and bool(self.exact) and not isinstance(self.distribution, MonteCarlo)

    @property
    def sigma(self) -> sp.Matrix | None:
        """``Σ(θ) = Cov_x[g] / B`` (the covariance of the minibatch flow ``g_B``)."""
        return None if self.covariance is None else self.covariance / self.batch_symbol

    def expressions(self) -> list[sp.Expr]:
        """Every stored expression (for symbol tables and signatures)."""
        out = [self.per_sample_loss, *self.gradient, *self.preconditioner]
        out += list(self.mean or ()) + (list(self.covariance) if self.covariance is not None else [])
        return out + _distribution_expressions(self.distribution)

    def validate(self, system) -> None:
        """Raise ``ValueError`` unless the noise fits ``system`` (same state; no unknown symbols)."""
        where = f"{system.paper}/{system.name} noise"
        if tuple(self.state) != tuple(system.state):
            raise ValueError(f"{where}: state {self.state} differs from the system's {system.state}")
        clash = {str(s) for s in self.samples} & {str(s) for s in (*system.state, *system.parameters)}
        if clash:
            raise ValueError(f"{where}: sample symbols {sorted(clash)} are also state or parameters")
        known = set(system.state) | set(system.parameters)
        stored = [*self.gradient, *(self.mean or ()), *(self.covariance if self.covariance is not None else ())]
        unknown = set().union(*(sp.sympify(e).free_symbols for e in stored)) - known - set(self.samples)
        if unknown:
            raise ValueError(f"{where}: uses undeclared symbols {sorted(map(str, unknown))}")
        if self.mean is not None and set().union(*(e.free_symbols for e in self.mean)) & set(self.samples):
            raise ValueError(f"{where}: E[g] still depends on the sample symbols")


def _distribution_expressions(dist) -> list[sp.Expr]:
    if isinstance(dist, Finite):
        return [*dist.probabilities, *(v for o in dist.outcomes for v in o.values())]
    if isinstance(dist, Moments):
        return [dist.mgf]
    if isinstance(dist, Independent):
        return [e for p in dist.parts for e in _distribution_expressions(p)]
    if isinstance(dist, Mixture):
        return [*dist.weights, *(e for c in dist.components for e in _distribution_expressions(c))]
    return []


def law_sampler(dist) -> Callable | None:
    """The sampler that draws ``dist`` (``sampler(key, n, p) -> {name: (n,) array}``): a
    :class:`MonteCarlo`'s own, an exact law's optional ``ref`` (a :class:`Moments` or
    :class:`Independent` law that names one), else ``None``."""
    if isinstance(dist, MonteCarlo):
        return dist.draw()
    ref = getattr(dist, "ref", "")
    if not ref:
        return None
    from .refs import resolve_ref

    return resolve_ref(ref, "sampler")


def _numeric_law(dist, values: Mapping[sp.Symbol, Any]):
    """``dist`` with the numbers ``values`` substituted for its parameters."""
    if isinstance(dist, Finite):
        return Finite(tuple({s: v.xreplace(values) for s, v in o.items()} for o in dist.outcomes),
                      tuple(sp.sympify(p).xreplace(values) for p in dist.probabilities))
    if isinstance(dist, Moments):
        return Moments(dist.variables, dist.mgf.xreplace(values), dist.dummies, dist.description, simplify=False)
    if isinstance(dist, Independent):
        return Independent(tuple(_numeric_law(p, values) for p in dist.parts))
    if isinstance(dist, Mixture):
        return Mixture(tuple(w.xreplace(values) for w in dist.weights),
                       tuple(_numeric_law(c, values) for c in dist.components))
    raise ConfigError("distribution", f"a {dist.kind} law has no exact moments")


def covariance_at(system, state: Mapping[str, float], parameters: Mapping[str, float]) -> np.ndarray:
    """``Cov_x[g]`` per sample (``d x d``, float64) of ``system.noise`` at one point, exactly: the
    numbers substituted into the law and into ``g`` first, then the law's exact moments (the
    closed-form matrix where the noise has one; the implicit covariance of a finite or
    closed-form-moments law otherwise). ``state``/``parameters``: values by name. A Monte-Carlo
    noise has none (:class:`ConfigError`)."""
    noise = system.noise
    if noise is None or isinstance(noise.distribution, MonteCarlo):
        raise ConfigError("noise", f"{system.paper}/{system.name}: no exact covariance (Monte-Carlo law)")
    values = {s: sp.Float(float(state[str(s)])) for s in system.state}
    values.update({s: sp.Float(float(parameters[str(s)])) for s in system.parameters})
    if noise.covariance is not None:
        return np.array(noise.covariance.xreplace(values).evalf(), dtype=float)
    g = [sp.expand(e.xreplace(values)) for e in noise.gradient]
    mean, S = _numeric_law(noise.distribution, values).moments(g)
    m = np.array([float(e) for e in mean])
    return np.array(S.evalf(), dtype=float) - np.outer(m, m)


def _tidy(e: sp.Expr, simplify: bool) -> sp.Expr:
    e = sp.sympify(e)
    if simplify and sp.count_ops(e) <= SIMPLIFY_MAX_OPS:
        return sp.simplify(e)
    return e


def _as_map(preconditioner, d: int) -> sp.Matrix:
    if isinstance(preconditioner, sp.MatrixBase):
        M = sp.Matrix(preconditioner)
    elif isinstance(preconditioner, (list, tuple)):
        M = sp.Matrix([sp.sympify(v) for v in preconditioner])
    else:
        M = sp.Matrix([[sp.sympify(preconditioner)]])
    if M.shape not in {(1, 1), (d, 1), (d, d)}:
        raise ConfigError("preconditioner", f"shape {M.shape} fits neither a scalar, ({d}, 1) nor ({d}, {d})")
    return M


def _apply_map(M: sp.Matrix, grad: sp.Matrix) -> list[sp.Expr]:
    if M.shape == (1, 1):
        return list(-M[0, 0] * grad)
    if M.shape[1] == 1:
        return [-m * g for m, g in zip(M, grad)]
    return list(-M * grad)


def expectation(expr, distribution) -> sp.Expr:
    """``E_x[expr]`` under ``distribution`` (e.g. the population loss from the per-sample loss)."""
    return distribution.expect(sp.sympify(expr))


def derive_noise(per_sample_loss, state: Sequence[sp.Symbol], samples: Sequence[sp.Symbol], distribution, *,
                 preconditioner=1, batch_symbol: sp.Symbol = BATCH, description: str = "", linearize: bool = False,
                 simplify: bool = True, covariance: bool = True) -> Noise:
    """Differentiate ``per_sample_loss`` w.r.t. ``state``, apply the flow's map ``preconditioner``
    (scalar, per-coordinate sequence or matrix: ``rhs = -P ∇ E ℓ``) and form ``E_x[g]`` and
    ``Cov_x[g]`` (module docstring). ``linearize``: the delta method for a :class:`Moments` part
    whose ``g`` is not polynomial (``exact=False``). ``simplify``: ``sp.simplify`` every entry
    below :data:`SIMPLIFY_MAX_OPS` operations. ``covariance=False`` (an exact law): leave
    ``Cov_x[g]`` implicit (``Noise.covariance`` is ``None``) instead of forming its ``d x d``
    symbolic entries — for large states (a :class:`Finite` law: the SDE's ``"outcomes"`` factor is
    exact) or a covariance too long to be of use as a formula (:func:`covariance_at` evaluates it
    exactly at a point)."""
    state, samples = tuple(state), tuple(samples)
    loss = sp.sympify(per_sample_loss)
    if set(distribution.symbols) != set(samples):
        raise ConfigError("distribution", f"covers {sorted(map(str, distribution.symbols))}, the samples are "
                                          f"{sorted(map(str, samples))}")
    d = len(state)
    M = _as_map(preconditioner, d)
    g = tuple(_apply_map(M, sp.Matrix([sp.diff(loss, s) for s in state])))
    common = dict(per_sample_loss=loss, state=state, samples=samples, distribution=distribution, preconditioner=M,
                  gradient=g, batch_symbol=batch_symbol, description=description)
    if isinstance(distribution, MonteCarlo):
        return Noise(mean=None, covariance=None, exact=False, method="monte_carlo", **common)
    if not covariance:
        if linearize or not distribution.exact:
            raise ConfigError("covariance", "only an exact law's covariance can be left implicit")
        # E g = -P grad E[l]: the law does not depend on theta, so one expectation (of the scalar
        # loss) instead of d (of the flow's components)
        expected = distribution.expect(loss)
        mean = tuple(_tidy(e, simplify) for e in _apply_map(M, sp.Matrix([sp.diff(expected, s) for s in state])))
        method = "finite" if isinstance(distribution, Finite) else "moments"
        return Noise(mean=mean, covariance=None, exact=True, method=method, **common)
    mean, S = distribution.moments(g, linearize)
    mean = tuple(_tidy(e, simplify) for e in mean)
    cov = sp.Matrix(d, d, lambda i, j: S[i, j] - mean[i] * mean[j])
    cov = sp.Matrix(d, d, lambda i, j: _tidy(cov[i, j], simplify) if i <= j else 0)
    cov = sp.Matrix(d, d, lambda i, j: cov[min(i, j), max(i, j)])
    method = "delta" if linearize else ("finite" if isinstance(distribution, Finite) else "moments")
    return Noise(mean=mean, covariance=cov, exact=bool(distribution.exact and not linearize), method=method, **common)


# ------------------------------------------------------------------------------------------------
# Checks and the time scaling
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DriftCheck:
    """Result of :func:`check_drift`: ``symbolic`` (True: proven equal by sympy; False: not
    proven, checked numerically), the largest absolute and relative errors over ``points`` random
    points (for a sampler: ``max_z``, the largest |z-score| of the Monte-Carlo mean), ``passed``."""

    symbolic: bool
    points: int
    max_abs_error: float
    max_rel_error: float
    max_z: float | None
    passed: bool


def _random_values(symbols, ranges, rng, default):
    vals = {}
    for s in symbols:
        lo, hi = ranges.get(str(s), default)
        if s.is_integer:
            vals[s] = int(rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1))
        else:
            vals[s] = float(rng.uniform(lo, hi))
    return vals


def _point_parameters(system, ranges, rng, parameters) -> dict:
    if parameters is None:
        return _random_values(system.parameters, ranges, rng, (0.2, 0.8))
    values = parameters(rng)
    return {s: float(values[str(s)]) for s in system.parameters}


def check_drift(system, noise: Noise | None = None, *, points: int = 16, seed: int = 0, rtol: float = 1e-10,
                ranges: Mapping[str, tuple[float, float]] | None = None, mc_samples: int = 20000,
                z_max: float = 5.0, parameters: Callable[[np.random.Generator], Mapping[str, float]] | None = None
                ) -> DriftCheck:
    """Hold ``E_x[g]`` against ``system.rhs`` (definitions expanded).

    Symbolic first (``sp.simplify(E g - rhs) == 0`` per component, for entries below
    :data:`SIMPLIFY_MAX_OPS`); otherwise numerically at ``points`` random points — state
    coordinates uniform on ``(-1, 1)``, parameters on ``(0.2, 0.8)`` (integer symbols: integers in
    the range), or ``ranges[name]`` — passing when every ``|E g - rhs| <= rtol * max(1, |rhs|)``.
    For a Monte-Carlo sampler: ``mc_samples`` draws per point, passing when every |z| of the
    sample mean against ``rhs`` is below ``z_max``. ``parameters(rng) -> {name: value}`` draws the
    parameters of a point instead (for parameters tied by constraints the drift's derivation used,
    e.g. a stochastic matrix and its stationary law)."""
    noise = system.noise if noise is None else noise
    if noise is None:
        raise ConfigError("noise", f"{system.paper}/{system.name} has no noise")
    rhs = system.expanded_rhs
    rng = np.random.default_rng(seed)
    ranges = dict(ranges or {})
    if noise.mean is not None:
        diffs = [e - f for e, f in zip(noise.mean, rhs)]
        proven = all(sp.count_ops(e) <= SIMPLIFY_MAX_OPS and sp.simplify(e) == 0 for e in diffs)
        f_mean = compile_expressions((system.state, system.parameters), list(noise.mean))
        f_rhs = compile_expressions((system.state, system.parameters), list(rhs))
        worst_abs = worst_rel = 0.0
        for _ in range(points):
            y = _random_values(system.state, ranges, rng, (-1.0, 1.0))
            p = _point_parameters(system, ranges, rng, parameters)
            yv, pv = [y[s] for s in system.state], [p[s] for s in system.parameters]
            a, b = np.asarray(f_mean(yv, pv), float), np.asarray(f_rhs(yv, pv), float)
            err = np.abs(a - b)
            worst_abs = max(worst_abs, float(err.max()))
            worst_rel = max(worst_rel, float((err / np.maximum(1.0, np.abs(b))).max()))
        return DriftCheck(bool(proven), points, worst_abs, worst_rel, None, bool(proven or worst_rel <= rtol))
    # Monte Carlo: the sample mean of g against rhs, in standard errors
    import jax

    enable_x64()  # float64 draws
    f_g = compile_expressions((system.state, system.parameters, noise.samples), list(noise.gradient))
    f_rhs = compile_expressions((system.state, system.parameters), list(rhs))
    draw = law_sampler(noise.distribution)
    worst_z = worst_abs = 0.0
    for k in range(points):
        y = _random_values(system.state, ranges, rng, (-1.0, 1.0))
        p = _point_parameters(system, ranges, rng, parameters)
        yv, pv = [y[s] for s in system.state], np.array([p[s] for s in system.parameters])
        xs = draw(jax.random.key(seed * 7919 + k), mc_samples, pv)
        G = np.stack([np.broadcast_to(np.asarray(c, float), (mc_samples,))
                      for c in f_g(yv, pv, [np.asarray(xs[str(s)]) for s in noise.samples])], axis=1)
        b = np.asarray(f_rhs(yv, pv), float)
        se = G.std(0, ddof=1) / np.sqrt(mc_samples)
        diff = np.abs(G.mean(0) - b)
        z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(diff > rtol, np.inf, 0.0))
        worst_z, worst_abs = max(worst_z, float(z.max())), max(worst_abs, float(diff.max()))
    return DriftCheck(False, points, worst_abs, float("nan"), worst_z, bool(worst_z < z_max))


def step_plan(ts: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """The Euler grid of an SDE on output times ``ts`` with step ``dt`` (what every engine of
    :func:`simulate.solve_sde` steps, and what a theory's own reference of the SDE must match):
    steps per output interval and their size, ``(n_i, h_i)`` for the ``len(ts) - 1`` intervals,
    ``n_i = ceil((ts[i+1]-ts[i])/dt)`` (1e-9 relative slack so exact multiples are not split),
    ``h_i = (ts[i+1]-ts[i])/n_i``."""
    gaps = np.diff(np.asarray(ts, dtype=np.float64))
    n = np.maximum(np.ceil(gaps / dt * (1 - 1e-9)), 1).astype(np.int64)
    return n, gaps / n


def step_time(config) -> float:
    """``Δτ``: the ODE time of one optimiser step, read from the paper's own
    ``config.ode_time`` (``ode_time(1) - ode_time(0)``). :class:`ConfigError` (field ``ode_time``)
    unless ``ode_time`` is affine in the step with a positive slope (the SDE needs a constant
    time per step)."""
    t0 = float(config.ode_time(0))
    dt = float(config.ode_time(1)) - t0
    if not dt > 0:
        raise ConfigError("ode_time", f"one optimiser step must advance the ODE time; got {dt}")
    probes = [2, 10, 1000] + ([int(config.steps)] if hasattr(config, "steps") else [])
    for s in probes:
        want = t0 + s * dt
        got = float(config.ode_time(s))
        if abs(got - want) > 1e-9 * max(1.0, abs(want)):
            raise ConfigError("ode_time", f"is not affine in the step (ode_time({s}) = {got}, expected {want}); "
                                          "the SDE needs a constant ODE time per step")
    return dt
