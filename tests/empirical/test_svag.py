"""empirical/svag.py: SVAG's coefficients and schedule, and its weak convergence to the SDE on the
linear-regression toy, where the second moment of every process is known in closed form."""

import numpy as np
import pytest

import simulate
from empirical.svag import SVAG, svag_coefficients, svag_gradient
from figures.calibration import weak_error
from helpers import linreg_toy as toy
from helpers import ou_toy as ou
from theory import ConfigError


@pytest.mark.parametrize("l", [1, 2, 4, 8, 3.5])
def test_coefficients_keep_the_mean_and_multiply_the_variance_by_l(l):
    c1, c2 = svag_coefficients(l)
    assert c1 + c2 == pytest.approx(1, abs=1e-15) and c1**2 + c2**2 == pytest.approx(l, rel=1e-14)


def test_svag_gradient_draws_two_independent_minibatches():
    rng = np.random.default_rng(0)
    calls = []

    def minibatch_gradient(theta):
        calls.append(1)
        return {"w": theta + rng.standard_normal(3), "b": (rng.standard_normal(), 1.0)}

    g = svag_gradient(minibatch_gradient, 4)
    draws = [g(np.zeros(3)) for _ in range(40000)]
    assert len(calls) == 80000
    W = np.array([d["w"] for d in draws])
    assert np.abs(W.mean(0)).max() < 4.5 * np.sqrt(4 / 40000)
    assert np.abs(W.var(0) / 4 - 1).max() < 4.5 * np.sqrt(2 / 40000)  # variance x l
    assert draws[0]["b"][1] == pytest.approx(1.0)  # a constant leaf is unchanged (c1 + c2 = 1)
    assert len(calls) == 80000 and svag_gradient(minibatch_gradient, 1)(np.zeros(3))["b"][1] == 1.0
    assert len(calls) == 80001


def test_schedule_and_bad_scale():
    sv = SVAG(4)
    cfg = toy.LinRegConfig(lr=0.2, steps=10, log_every=5)
    assert (sv.lr(0.2), sv.steps(10), sv.step_time(0.2)) == (0.05, 40, 0.05)
    np.testing.assert_array_equal(sv.log_steps(cfg), [0, 20, 40])
    for bad in (0, 0.5, 2.5, True):
        with pytest.raises(ConfigError, match="l"):
            SVAG(bad)
    with pytest.raises(ConfigError, match="l"):
        svag_coefficients(0.5)


# -- weak convergence on the OU toy ----------------------------------------------------------------
CFG = ou.OUConfig(lr=0.6, batch=1, steps=8, log_every=4)
SCALES = (1, 2, 4, 8)
N = 200000
#: the SDE reference: Euler–Maruyama with dt = Δτ / REF (its variance equals SVAG(REF)'s exactly)
REF = 64


def _f(theta):
    return (theta - CFG.mu) ** 2  # starts at μ: E f is the variance the noise built up


@pytest.fixture(scope="module")
def sde_reference():
    model, t = simulate.noise_sde(ou.problem(CFG))
    ens = simulate.solve_sde(model, t, paths=N, seed=11, dt=model.dt / REF)
    return ens["theta"].values[:, 1:]


def _svag_runs():
    return {l: ou.sgd(CFG, N, seed=100 + l, l=l)[:, 1:] for l in SCALES}


def test_svag_weak_error_slope_is_order_one(sde_reference):
    """Weak error of f = (θ - μ)² at the logged times, SVAG vs the SDE: each error matches the
    closed form, and the slope in l is the closed form's; against the exact SDE the slope is -1
    up to the O(1/l²) terms at l = 1 (order-1 weak convergence, Li, Malladi & Arora 2021)."""
    we = weak_error(_svag_runs(), sde_reference, f=_f, confidence=0.99, boot=200, seed=0)
    v_ref = ou.variance_svag(CFG, REF)[1:]
    exact = np.array([np.sqrt(np.mean((ou.variance_svag(CFG, l)[1:] - v_ref) ** 2)) for l in SCALES])
    assert np.all((we.error_low <= exact) & (exact <= we.error_high))
    exact_slope = np.polyfit(np.log(SCALES), np.log(exact), 1)[0]
    assert we.slope_low <= exact_slope <= we.slope_high and we.slope_high - we.slope_low < 0.5
    v_sde = ou.variance_sde(CFG)[1:]
    true = [np.sqrt(np.mean((ou.variance_svag(CFG, l)[1:] - v_sde) ** 2)) for l in SCALES]
    assert abs(np.polyfit(np.log(SCALES), np.log(true), 1)[0] + 1) < 0.2
    assert abs(we.slope + 1) < 0.4


def test_planted_unamplified_svag_does_not_converge(sde_reference, monkeypatch):
    """SVAG without the noise amplification (lr/l and l x steps only: SGD with a smaller step)
    drifts towards the ODE, not the SDE: the weak error grows with l instead of falling as 1/l."""
    import empirical.svag

    monkeypatch.setattr(empirical.svag, "svag_combine", lambda g1, g2, l: g1)
    we = weak_error(_svag_runs(), sde_reference, f=_f, confidence=0.99, boot=200, seed=0)
    assert we.slope_low > 0
