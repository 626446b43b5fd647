"""theory/noise.py: per-sample loss -> per-sample flow -> drift check -> covariance, held against
closed forms, against per-sample gradients computed independently (torch autograd, hand-typed
numpy) and against planted defects; the JSON round trip of a system's noise."""

import json
from dataclasses import dataclass

import numpy as np
import pytest
import sympy as sp
import torch
from click.testing import CliRunner

from tiny import ROW
from tiny.theory import TinyConfig, systems
from tiny.theory import derive as tiny_derive
from helpers import linreg_toy as toy
from theory import ConfigError, ParamsBase, ReducedSystem, load_system
from theory.noise import (Finite, Independent, Mixture, Moments, MonteCarlo, check_drift, covariance_at, derive_noise,
                          expectation, step_time)


def _cov_z_scores(G: np.ndarray, C: np.ndarray) -> np.ndarray:
    """|z| of each entry of the sample covariance of the rows of ``G`` (n, d) against ``C``: the
    standard error of entry (i, j) from the fourth moments, ``sqrt(Var[(g_i - m_i)(g_j - m_j)]/n)``."""
    n = G.shape[0]
    D = G - G.mean(0)
    P = D[:, :, None] * D[:, None, :]
    se = P.std(0, ddof=1) / np.sqrt(n)
    return np.abs(P.mean(0) * n / (n - 1) - C) / se


# -- the tiny paper: one logit, Bernoulli labels (a finite distribution) ---------------------------
def test_tiny_drift_and_covariance_closed_forms():
    S = systems()[0]
    check = check_drift(S)
    assert check.symbolic and check.passed and check.max_abs_error < 1e-12
    # g = lr (y - sigma(a)): Var over y ~ Bernoulli(p) is lr^2 p (1 - p), whatever a is
    assert sp.simplify(S.noise.covariance[0, 0] - tiny_derive.lr**2 * tiny_derive.p * (1 - tiny_derive.p)) == 0
    assert S.noise.exact and S.noise.method == "finite" and S.noise.sigma[0, 0].has(S.noise.batch_symbol)


def test_tiny_covariance_equals_torch_per_sample_gradients():
    """Per-sample gradients of the real model's loss (torch autograd of BCE-with-logits on sampled
    labels) have the derived variance, within Monte-Carlo error."""
    S = systems()[0]
    cfg = TinyConfig()
    f_cov = sp.lambdify((S.state, S.parameters), S.noise.covariance, "numpy")
    gen = torch.Generator().manual_seed(3)
    for a0 in (-1.0, 0.4, 2.0):
        labels = (torch.rand(20000, generator=gen, dtype=torch.float64) < cfg.p).double()
        w = torch.full(labels.shape, a0, dtype=torch.float64, requires_grad=True)  # one copy per sample
        losses = torch.nn.functional.binary_cross_entropy_with_logits(w, labels, reduction="none")
        (per,) = torch.autograd.grad(losses.sum(), w)  # entry i: d loss_i / d a
        G = -cfg.lr * per.numpy()[:, None]  # the per-sample flow: one step moves a by -lr * grad
        C = np.asarray(f_cov([a0], [cfg.p, cfg.lr]), float)
        assert _cov_z_scores(G, C).max() < 4.5
        # and the mean is the flow
        rhs = S.to_numpy()(0.0, np.array([a0]), np.array([cfg.p, cfg.lr]))
        assert abs(G.mean() - rhs[0]) < 4.5 * G.std() / np.sqrt(len(G))


def test_planted_wrong_map_or_sign_fails_the_drift_check():
    S = systems()[0]
    for bad in (2 * tiny_derive.lr, -tiny_derive.lr, 1):
        noise = derive_noise(tiny_derive.per_sample_loss(), (tiny_derive.a,), (tiny_derive.y,), tiny_derive.LABELS,
                             preconditioner=bad)
        check = check_drift(S, noise)
        assert not check.symbolic and not check.passed and check.max_abs_error > 1e-3


# -- linear regression: Gaussian features (closed-form moments) ------------------------------------
def test_linreg_exact_moments_match_isserlis():
    S = toy.system()
    check = check_drift(S)
    assert check.symbolic and check.passed
    u = sp.Matrix([toy.w1 - toy.ws1, toy.w2 - toy.ws2])
    closed = (u.dot(u) + toy.s**2) * sp.eye(2) + u * u.T  # Isserlis: E[(u.x)^2 x x^T] = |u|^2 I + 2 u u^T
    assert sp.simplify(S.noise.covariance - closed) == sp.zeros(2, 2)
    assert S.noise.method == "moments" and S.noise.exact


def test_linreg_covariance_equals_sampled_per_sample_gradients():
    S = toy.system()
    f_cov = sp.lambdify((S.state, S.parameters), S.noise.covariance, "numpy")
    rng = np.random.default_rng(0)
    wstar, sd = np.array([1.0, -0.5]), 0.7
    for w in ([0.0, 0.0], [2.0, 1.0], [1.0, -0.5]):
        X = rng.standard_normal((50000, 2))
        y = X @ wstar + sd * rng.standard_normal(50000)
        G = -((X @ np.array(w) - y)[:, None] * X)  # the hand-typed per-sample flow
        C = np.asarray(f_cov(w, [*wstar, sd]), float)
        assert _cov_z_scores(G, C).max() < 4.5


def test_numeric_drift_check_at_random_points():
    """A flow sympy cannot prove equal (written differently) is checked at random points to 1e-10;
    a flow off by 1e-6 fails."""
    S = toy.system()
    rhs = tuple(sp.expand((e + 1) ** 2) - sp.expand(e**2 + 2 * e + 1) + e for e in S.rhs)  # == rhs
    same = ReducedSystem(name="linreg", paper="toy", state=S.state, parameters=S.parameters, rhs=rhs, noise=S.noise)
    assert check_drift(same).passed
    off = ReducedSystem(name="linreg", paper="toy", state=S.state, parameters=S.parameters,
                        rhs=(S.rhs[0] * (1 + sp.Float(1e-6)), S.rhs[1]), noise=S.noise)
    check = check_drift(off)
    assert not check.passed and 1e-8 < check.max_rel_error < 1e-5


def test_drift_check_at_constrained_parameter_points():
    """A drift derived with a constraint among the parameters (here p + r = 1) equals E[g] only where
    the constraint holds: independent random parameters fail, ``parameters=`` draws that keep it pass."""
    a, p, r, lr = sp.symbols("a p r lr", real=True)
    y = sp.Symbol("y", real=True)
    ell = -y * a + sp.log(1 + sp.exp(a))
    noise = derive_noise(ell, (a,), (y,), Finite(({y: 1}, {y: 0}), (p, 1 - p)), preconditioner=lr)
    flow = lr * ((1 - r) - 1 / (1 + sp.exp(-a)))  # uses p = 1 - r
    S = ReducedSystem(name="constrained", paper="toy", state=(a,), parameters=(p, r, lr), rhs=(flow,), noise=noise)
    assert not check_drift(S).passed

    def valid(rng):
        pv = rng.uniform(0.2, 0.8)
        return {"p": pv, "r": 1 - pv, "lr": rng.uniform(0.2, 0.8)}

    assert check_drift(S, parameters=valid).passed


def test_monte_carlo_noise_drift_check():
    S = toy.monte_carlo_system()
    assert S.noise.covariance is None and not S.noise.exact and S.noise.method == "monte_carlo"
    check = check_drift(S, ranges={"s": (0.5, 1.0)})
    assert check.passed and check.max_z < 5
    bad = derive_noise(toy.per_sample_loss(), toy.STATE, toy.SAMPLES, S.noise.distribution, preconditioner=1.2)
    assert not check_drift(S, bad).passed


# -- distributions ---------------------------------------------------------------------------------
def test_multinomial_frequencies_have_the_scan_snap_covariance():
    """q = c/n, c ~ Mult(n, P): E q = P and Cov q = (diag P - P P^T)/n (docs/papers/scan_snap.md §9), n symbolic."""
    n = sp.Symbol("n", positive=True, integer=True)
    P0, P1 = sp.symbols("P0 P1", positive=True)
    P = (P0, P1, 1 - P0 - P1)
    q = sp.symbols("q0:3", real=True)
    m = Moments.multinomial(q, n, P, scale=1 / n)
    want = (sp.diag(*P) - sp.Matrix(P) * sp.Matrix(P).T) / n
    assert [sp.simplify(a - b) for a, b in zip(m.mean(), P)] == [0, 0, 0]
    assert sp.simplify(m.covariance() - want) == sp.zeros(3, 3)


def test_delta_method_is_first_order_and_marked_inexact():
    theta = sp.Symbol("theta", real=True)
    x = sp.Symbol("x", real=True)
    sd = sp.Symbol("sd", positive=True)
    dist = Moments.gaussian((x,), mean=[1], cov=[sd**2])
    loss = sp.exp(theta * x)  # g = -x exp(theta x): not polynomial in x
    with pytest.raises(ConfigError, match="not polynomial"):
        derive_noise(loss, (theta,), (x,), dist)
    nz = derive_noise(loss, (theta,), (x,), dist, linearize=True)
    J = sp.diff(-x * sp.exp(theta * x), x).subs(x, 1)
    assert not nz.exact and nz.method == "delta"
    assert sp.simplify(nz.covariance[0, 0] - J**2 * sd**2) == 0
    assert sp.simplify(nz.mean[0] + sp.exp(theta)) == 0


def test_mixture_and_independent_follow_total_variance():
    theta, x, y = sp.symbols("theta x y", real=True)
    mu0, mu1 = sp.symbols("mu0 mu1", real=True)
    mix = Mixture((sp.Rational(1, 2), sp.Rational(1, 2)),
                  (Moments.gaussian((x,), [mu0]), Moments.gaussian((x,), [mu1])))
    nz = derive_noise((theta - x) ** 2 / 2, (theta,), (x,), mix)
    assert sp.simplify(nz.covariance[0, 0] - (1 + (mu0 - mu1) ** 2 / 4)) == 0
    both = Independent((Finite.bernoulli(y, sp.Rational(1, 3)), Moments.gaussian((x,))))
    nz = derive_noise((theta - x - y) ** 2 / 2, (theta,), (x, y), both)
    assert sp.simplify(nz.covariance[0, 0] - (1 + sp.Rational(2, 9))) == 0
    assert sp.simplify(nz.mean[0] - (sp.Rational(1, 3) - theta)) == 0


def test_bad_distributions_and_noise_are_rejected():
    y, a = sp.symbols("y a", real=True)
    with pytest.raises(ValueError, match="sum to 1"):
        Finite(({y: 0}, {y: 1}), (sp.Rational(1, 2), sp.Rational(1, 3)))
    with pytest.raises(ConfigError, match="covers"):
        derive_noise(a * y, (a,), (y, a), Finite.bernoulli(y, sp.Rational(1, 2)))
    S = systems()[0]
    with pytest.raises(ValueError, match="state"):
        ReducedSystem(name="x", paper="tiny", state=(sp.Symbol("b", real=True),), parameters=S.parameters,
                      rhs=(0,), noise=S.noise)


# -- time per step from the paper's own ode_time ---------------------------------------------------
@dataclass(frozen=True)
class _Momentum(ParamsBase):
    momentum: float = 0.9
    steps: int = 100
    log_every: int = 10

    def ode_time(self, step):
        return float(step) / (1 - self.momentum)


@dataclass(frozen=True)
class _Curved(_Momentum):
    def ode_time(self, step):
        return float(step) ** 1.5


def test_step_time_reads_the_config():
    assert step_time(TinyConfig(lr=0.3)) == 1.0
    assert step_time(toy.LinRegConfig(lr=0.3)) == pytest.approx(0.3, rel=1e-15)
    assert step_time(_Momentum()) == pytest.approx(10.0, rel=1e-12)
    with pytest.raises(ConfigError, match="ode_time"):
        step_time(_Curved())


# -- JSON round trip -------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: systems()[0], toy.system, toy.monte_carlo_system])
def test_json_round_trip_keeps_the_noise(make):
    S = make()
    back = load_system(json.loads(json.dumps(S.to_json())))
    assert back.equivalent(S)
    n0, n1 = S.noise, back.noise
    assert (n1.method, n1.exact, n1.samples, n1.batch_symbol) == (n0.method, n0.exact, n0.samples, n0.batch_symbol)
    assert n1.gradient == n0.gradient and n1.mean == n0.mean
    assert (n1.covariance is None) == (n0.covariance is None)
    if n0.covariance is not None:
        assert n1.covariance == n0.covariance
        assert check_drift(back).symbolic
    else:
        assert n1.distribution.draw() is toy.sample  # the sampler, re-imported by reference


def test_json_round_trip_mixture():
    theta, x = sp.symbols("theta x", real=True)
    mu0, mu1 = sp.symbols("mu0 mu1", real=True)
    mix = Mixture((sp.Rational(1, 4), sp.Rational(3, 4)),
                  (Independent((Moments.gaussian((x,), [mu0]),)), Finite.bernoulli(x, sp.Rational(1, 2))))
    nz = derive_noise((theta - x) ** 2 / 2, (theta,), (x,), mix)
    S = ReducedSystem(name="m", paper="toy", state=(theta,), parameters=(mu0, mu1), rhs=(nz.mean[0],), noise=nz)
    back = load_system(S.to_json())
    assert back.equivalent(S) and back.noise.distribution.components[1].kind == "finite"


def test_equivalent_sees_the_noise():
    S = systems()[0]
    bare = ReducedSystem(name=S.name, paper=S.paper, state=S.state, parameters=S.parameters, rhs=S.rhs,
                         observables=S.observables, spec=S.spec)
    assert not bare.equivalent(S)
    assert load_system(bare.to_json()).noise is None


def test_cli_derive_json_shows_the_noise():
    from figures.cli import main
    from figures.papers import PAPERS, Paper, register

    register(Paper(**ROW))
    try:
        res = CliRunner().invoke(main, ["derive", "tiny", "--format", "json", "--no-cache"])
        assert res.exit_code == 0, res.output
        noise = json.loads(res.output)["systems"][0]["noise"]
        assert noise["method"] == "finite" and noise["exact"] is True
        assert sp.simplify(sp.sympify(noise["covariance"][0][0]) - sp.sympify("lr**2*p*(1 - p)")) == 0
        assert load_system(res.output).noise.covariance == systems()[0].noise.covariance
    finally:
        PAPERS.pop("tiny")


def test_monte_carlo_sampler_needs_an_importable_reference():
    S = toy.system(MonteCarlo(toy.SAMPLES, lambda key, n, p: toy.sample(key, n, p)))
    with pytest.raises(ValueError, match="module-level"):
        S.to_json()
    by_function = toy.system(MonteCarlo(toy.SAMPLES, toy.sample))  # the reference is read off the function
    assert load_system(by_function.to_json()).noise.distribution.draw() is toy.sample


def test_preconditioner_shapes_scale_the_covariance():
    """A per-coordinate map D gives D Cov D, a full matrix M gives M Cov M^T (SCB's D^-1 style maps)."""
    base = toy.system().noise.covariance
    d1, d2 = sp.symbols("d1 d2", positive=True)
    diag = derive_noise(toy.per_sample_loss(), toy.STATE, toy.SAMPLES, toy.gaussian_data(), preconditioner=(d1, d2))
    D = sp.diag(d1, d2)
    assert sp.simplify(diag.covariance - D * base * D) == sp.zeros(2, 2)
    M = sp.Matrix([[1, d1], [0, d2]])
    full = derive_noise(toy.per_sample_loss(), toy.STATE, toy.SAMPLES, toy.gaussian_data(), preconditioner=M)
    assert sp.simplify(full.covariance - M * base * M.T) == sp.zeros(2, 2)
    with pytest.raises(ConfigError, match="preconditioner"):
        derive_noise(toy.per_sample_loss(), toy.STATE, toy.SAMPLES, toy.gaussian_data(), preconditioner=(1, 2, 3))


def test_finite_covariance_left_implicit_is_exact_and_consistent():
    """``covariance=False`` (a large state's Finite noise): no d x d matrix, the same exact mean,
    and the outcomes factor realises the covariance the explicit derivation gives."""
    from theory.noise_sde import noise_sde
    from theory.problem import Problem

    th1, th2, y = sp.symbols("th1 th2 y", real=True)
    p = sp.Symbol("p", positive=True)
    loss = (th1 - y) ** 2 / 2 + th1 * th2 * y
    dist = Finite.categorical(y, (-1, 0, 2), (p / 2, 1 - p, p / 2))
    full = derive_noise(loss, (th1, th2), (y,), dist)
    lazy = derive_noise(loss, (th1, th2), (y,), dist, covariance=False)
    assert lazy.covariance is None and lazy.implicit_covariance and lazy.exact and lazy.method == "finite"
    assert not full.implicit_covariance and lazy.sigma is None
    assert all(sp.simplify(a - b) == 0 for a, b in zip(lazy.mean, full.mean))
    S = ReducedSystem(name="two", paper="toy", state=(th1, th2), parameters=(p,), rhs=tuple(full.mean), noise=lazy)
    assert check_drift(S).passed

    @dataclass(frozen=True)
    class Cfg(ParamsBase):
        lr: float = 0.1
        batch: int = 1

        def ode_time(self, step):
            return float(step)

        def ode_times(self):
            return np.array([0.0, 1.0])

    model, _ = noise_sde(Problem(S, {"p": 0.3}, [0.4, -0.7], np.array([0.0, 1.0]), {}, Cfg()))
    C = np.array(full.covariance.subs({p: 0.3, th1: 0.4, th2: -0.7}), dtype=float)
    np.testing.assert_allclose(model.per_sample_covariance([0.4, -0.7]), C, rtol=1e-12, atol=1e-14)
    # a closed-form law's covariance left implicit: the same mean, and covariance_at gives the matrix
    g_law = Moments.gaussian((y,), (p,), (p**2,))
    full_g = derive_noise(loss, (th1, th2), (y,), g_law)
    lazy_g = derive_noise(loss, (th1, th2), (y,), g_law, covariance=False)
    assert lazy_g.implicit_covariance and lazy_g.method == "moments" and lazy_g.exact
    assert all(sp.simplify(a - b) == 0 for a, b in zip(lazy_g.mean, full_g.mean))
    S_g = ReducedSystem(name="two", paper="toy", state=(th1, th2), parameters=(p,), rhs=tuple(full_g.mean),
                        noise=lazy_g)
    want = np.array(full_g.covariance.subs({p: 0.3, th1: 0.4, th2: -0.7}), dtype=float)
    np.testing.assert_allclose(covariance_at(S_g, {"th1": 0.4, "th2": -0.7}, {"p": 0.3}), want,
                               rtol=1e-12, atol=1e-14)
    with pytest.raises(ConfigError, match="exact law"):
        derive_noise((th1 - y) ** 2, (th1,), (y,), Moments.gaussian((y,)), covariance=False, linearize=True)


def test_moments_from_coefficients_equal_the_expectations_of_the_products():
    """Moments.moments decomposes each g_i into monomials once (E[g_i g_j] from the moment table,
    no product expanded): it equals the expectations of the expanded products, for Gaussian and
    multinomial variables, polynomials of degree 2 with symbolic coefficients."""
    from theory.noise import _second

    a, b = sp.symbols("a b", real=True)
    x1, x2, x3 = sp.symbols("x1 x2 x3", real=True)
    g = [a * x1 + b * x2**2 + 1, (a - b) * x1 * x2 + a**2, b * x3 - x1 + a * b]
    for dist in (Moments.gaussian((x1, x2, x3), mean=[1, a, 0], cov=[2, 1, b**2]),
                 Moments.multinomial((x1, x2, x3), 4, [sp.Rational(1, 2), sp.Rational(1, 3), sp.Rational(1, 6)],
                                     scale=sp.Rational(1, 4))):
        mean, S = dist.moments(g)
        mean0, S0 = _second(dist, g)
        assert all(sp.simplify(m - m0) == 0 for m, m0 in zip(mean, mean0))
        assert all(sp.simplify(S[i, j] - S0[i, j]) == 0 for i in range(3) for j in range(3))
