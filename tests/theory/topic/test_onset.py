"""theory/topic/onset.py against independent computations: the K/Q norm's closed form against the
propagator of the bilinear escape (scipy's expm), the predicted onset against a root of the norm
built from scipy's quadrature of the escape rate, and the tied line's ODE against its definition."""

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.linalg import expm
from scipy.optimize import brentq
from scipy.stats import ortho_group

from theory.topic import TopicConfig, onset


@pytest.fixture(scope="module")
def config():
    """The two-stage claims' setting (joint K/Q/V training from a small initialisation)."""
    return TopicConfig.preset("two_stage", quick=True)


def test_kq_norm_equals_the_propagator_of_the_linear_escape(config):
    """``W_K' = -c W_Q G^T``, ``W_Q' = -c W_K G`` from ``W_K, W_Q ~ N(0, eps^2)``: each of the d_a rows
    ``(k, q)`` moves by ``P = expm(t [[0, -c G], [-c G^T, 0]])``, so ``E ||W_K(t)||_F^2 = d_a eps^2
    ||P[:D]||_F^2``; with ``c t = X / sigma_max`` this is the closed form ``kq_norm(config, X)^2``."""
    e = onset.escape_constants(config)
    sigma, D, d_a = e["sigma"], e["D"], e["d_a"]
    rng = np.random.default_rng(0)
    G = ortho_group.rvs(D, random_state=rng) @ np.diag(sigma) @ ortho_group.rvs(D, random_state=rng)
    A = np.block([[np.zeros((D, D)), -G], [-G.T, np.zeros((D, D))]])
    for X in (0.0, 0.3, 1.7, 4.0):
        P = expm(A * X / e["sigma_max"])
        want = math.sqrt(d_a * config.kq_scale**2 * np.sum(P[:D] ** 2))
        assert onset.kq_norm(config, X) == pytest.approx(want, rel=1e-9)


def test_kq_norm_at_zero_growth_is_the_initial_norm(config):
    e = onset.escape_constants(config)
    assert onset.kq_norm(config, 0.0) == pytest.approx(config.kq_scale * math.sqrt(e["d_a"] * e["D"]), rel=1e-12)
    assert onset.onset_regime(config)["kq_initial_norm"] == pytest.approx(float(onset.kq_norm(config, 0.0)), rel=1e-12)


def test_predicted_onset_is_where_the_norm_reaches_one(config):
    """Independently: ``omega_2(t) = omega* (1 - exp(-lambda_V t))``, ``X(t) = int_0^t rho`` by
    scipy's adaptive quadrature, the onset the root of ``kq_norm(X(t)) = 1`` by brentq."""
    e = onset.escape_constants(config)
    lam_V, om_star = onset.stage1_rate(config)

    def rho(s):
        om = om_star * (1 - math.exp(-lam_V * s))
        return config.lr * config.kq_lr_ratio * abs(e["g_1"] * om + e["g_2"] * om**2) / math.sqrt(e["d_a"])

    def excess(t):
        return math.log(float(onset.kq_norm(config, quad(rho, 0.0, t, limit=200)[0])))

    t_max = config.steps  # the onset lies inside the run in this setting (the claims' regime)
    assert excess(0.0) < 0 < excess(t_max)  # K/Q start below norm 1 (small initialisation)
    want = brentq(excess, 0.0, t_max, xtol=1e-9)
    assert onset.predicted_onset_time(config) == pytest.approx(want, rel=2e-3)  # the 16001-point grid


def test_tied_line_flow_obeys_its_equation(config):
    """``lambda(X)`` solves ``d ln lambda / dX = 2 phi(lambda)`` from ``lambda_0 = s_0 / s_2*``,
    ``s_0 = eps^2 sqrt(d_a) / (2 v)``: checked by central differences of ln lambda."""
    line = onset.tied_line(config)
    assert line["phi"][0] == pytest.approx(1.0) and abs(line["phi"][-1]) < 0.05  # linear escape ... optimum
    e = onset.escape_constants(config)
    lam0 = config.kq_scale**2 * math.sqrt(e["d_a"]) / (2 * config.v) / line["s2_star"]
    X = np.linspace(0.0, 3.0, 61)
    lam = onset._lambda_of_X(config, X)
    assert lam[0] == pytest.approx(lam0, rel=1e-8)
    h = 1e-4
    slope = (np.log(onset._lambda_of_X(config, X[1:-1] + h)) - np.log(onset._lambda_of_X(config, X[1:-1] - h))) / (2 * h)
    want = 2 * np.interp(lam[1:-1], line["lam"], line["phi"], right=0.0)
    np.testing.assert_allclose(slope, want, rtol=1e-4, atol=1e-6)
