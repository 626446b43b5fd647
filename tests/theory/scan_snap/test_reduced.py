"""theory/scan_snap/reduced.py: the paper's closed forms (spec Appendix A checks 5-7, §4 test
values) and its reduced (Lemma 4) and snap (Theorem 4) ODEs."""

import math

import numpy as np
import sympy as sp

from theory import scan_snap as ss


def test_A5_h_invariant_and_lambert_closed_form():
    cf = ss.closed_forms()
    dinv = sp.diff(cf["h_invariant"], ss.h_sym) * cf["h_rate"]
    assert sp.simplify(dinv - ss.M_sym * ss.eta_Y) == 0
    # the Lambert-W solution satisfies Eqn. 44 (derivative, 40 digits) and h(0) = 0
    h = cf["h_lambert"]
    s = cf["s"]
    for M, eta in ((50, sp.Integer(2)), (1000, sp.Rational(1, 2)), (1000, sp.Integer(4))):
        hs = h.subs({ss.M_sym: M, ss.eta_Y: eta})
        assert abs(sp.N(hs.subs(s, 0), 40)) < 1e-35
        for sv in (sp.Rational(1, 2), 7, 80):
            lhs = sp.N(sp.diff(hs, s).subs(s, sv), 40)
            rhs = sp.N(cf["h_rate"].subs({ss.M_sym: M, ss.eta_Y: eta, ss.h_sym: hs.subs(s, sv)}), 40)
            assert abs(lhs - rhs) <= 1e-30 * abs(rhs)


def test_A6_Gamma_closed_form():
    cf = ss.closed_forms()
    # dGamma/dt with h = h(t/K): dGamma/dh * h_rate / K == eta_Z gamma
    d = sp.diff(cf["Gamma"], ss.h_sym) * cf["h_rate"] / ss.K_sym
    assert sp.simplify(d - ss.eta_Z * cf["gamma"]) == 0


def test_A7_B_and_snap_closed_forms():
    cf = ss.closed_forms()
    G = sp.Symbol("G", positive=True)
    gam = sp.Symbol("gamma", positive=True)
    B = cf["B"].subs(cf["Gamma"], G)
    B = sp.Rational(1, 4) * sp.log((ss.C0_sym + 4 * G) / ss.C0_sym)
    xi = gam / (ss.C0_sym + 4 * G)  # Eqn. 123
    assert sp.simplify(sp.diff(B, G) * ss.eta_Z * gam - ss.eta_Z * xi) == 0  # dB/dt = eta_Z xi
    z = -sp.Rational(1, 4) * sp.log(1 + 4 * G / ss.C0_sym)  # Eqn. 122
    assert sp.simplify(sp.diff(z, G) * ss.eta_Z * gam + ss.eta_Z * gam * sp.exp(4 * z) / ss.C0_sym) == 0
    assert sp.simplify(xi - gam * sp.exp(4 * z) / ss.C0_sym) == 0
    # both closed forms are what the module exports (in terms of Gamma(h))
    assert sp.simplify(cf["B"] - B.subs(G, cf["Gamma"])) == 0
    assert sp.simplify(cf["z_ct"] - z.subs(G, cf["Gamma"])) == 0


def test_theorem4_branches_are_eqn129_with_the_h_asymptotes():
    cf = ss.closed_forms()
    t, M, K = ss.t_sym, ss.M_sym, ss.K_sym
    for branch, h in (("B_early", ss.eta_Y * t / (M * K)), ("B_late", sp.log(M * ss.eta_Y * t / K) / M)):
        assert sp.simplify(cf["B_paper"].subs(ss.h_sym, h) - cf[branch]) == 0


def test_h_test_values_and_discrete_h():
    vals = {1: 4.998514e-4, 10: 4.874912e-3, 100: 1.058226e-2, 500: 1.237849e-2}
    for s, v in vals.items():
        assert math.isclose(ss.h_closed_form(s, 1000, 0.5), v, rel_tol=1e-6)
    assert math.isclose(ss.h_discrete(500, 1000, 0.5)[-1], 1.238426e-2, rel_tol=1e-6)
    assert math.isclose(ss.h_closed_form(80, 50, 2.0), 0.179, rel_tol=3e-3)
    assert math.isclose(ss.h_closed_form(70, 1000, 4.0), 0.0125, rel_tol=5e-3)
    # Lemma 7: 0 <= h* - h <= 2 eta_Y / M
    for M, eta in ((50, 0.5), (1000, 2.0)):
        hs = ss.h_discrete(200, M, eta)
        h = ss.h_closed_form(np.arange(201), M, eta)
        assert np.all(hs - h >= -1e-15) and np.all(hs - h <= 2 * eta / M)
    # Newton branch (huge A) satisfies Eqn. 45
    h = ss.h_closed_form(1e9, 100, 1.0)
    assert math.isclose(math.exp(100 * h) + 99 * 100 * h, 100 * 1e9 + 1, rel_tol=1e-12)


def test_Gamma_test_values_quadrature():
    from scipy.integrate import quad

    for t, v in ((50, 30.9737), (500, 463.7385), (3000, 699.0882)):
        closed = ss.Gamma_of_t(t, 1000, 10, 0.5, 0.5)
        q, _ = quad(lambda x: 0.5 * ss.gamma_of_t(x, 1000, 10, 0.5), 0, t, limit=400, epsabs=1e-12, epsrel=1e-12)
        assert math.isclose(closed, v, abs_tol=6e-5)
        assert math.isclose(closed, q, rel_tol=1e-7)


def test_transition_times():
    for eta, tp in ((0.5, 138.2), (1, 69.1), (2, 34.5), (5, 13.8)):
        t0p, t0 = ss.transition_times(1000, 10, eta)
        assert math.isclose(t0p, tp, abs_tol=0.06) and math.isclose(t0, 2 * t0p)


def test_snap_ode_matches_closed_forms_both_backends():
    import simulate as sim

    sysm = ss.snap_system()
    params = {"M": 100.0, "K": 2.0, "eta_Y": 1.0, "eta_Z": 0.5, "C_0": 1.0}
    t = np.linspace(0, 50, 26)
    for backend, method in (("scipy", "DOP853"),):  # diffrax: see the full-flow test (one jit per suite)
        tr = sim.solve(sysm, params, np.zeros(4), t, backend=backend, method=method, rtol=1e-11, atol=1e-13)
        h = ss.h_closed_form(t / 2, 100, 1.0)
        np.testing.assert_allclose(tr.h.values, h, rtol=1e-7, atol=1e-14)
        G = ss.Gamma_of_t(t, 100, 2, 1.0, 0.5)
        np.testing.assert_allclose(tr.Gamma.values, G, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(tr.z_ct.values, -0.25 * np.log(1 + 4 * G), rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(tr.B.values, ss.B_of_t(t, 100, 2, 1.0, 0.5), rtol=1e-7, atol=1e-12)


def test_reduced_system_invariant_and_eqn11():
    import simulate as sim

    cfg = ss.Config(eta_Y=1.0, eta_Z=1.0)
    sysm = ss.reduced_system(cfg)
    t = np.linspace(0, 200, 21)
    tr = sim.solve(sysm, ss.reduced_parameters(cfg), np.zeros(len(sysm.state)), t, backend="scipy", method="DOP853",
                   rtol=1e-10, atol=1e-12)
    task = ss.make_task(cfg)
    z = np.stack([tr[f"z_dt_{j}"].values for j in range(10)], -1)[1:]
    P = task.P[0, task.dt[0]]
    I = (1 - np.exp(-2 * z)) / P**2
    assert np.abs(I / I[:, :1] - 1).max() < 1e-7  # docs/papers/scan_snap.md §3.4 item 1, exact in the reduced ODE
    # Eqn. 11: r_{l/l'}(t) = r(0) chi_l(t) with f^2 ratios from the current logits
    c = P * np.exp(z)
    r = c[:, -1] ** 2 / c[:, 0] ** 2 - 1
    r0 = P[-1] ** 2 / P[0] ** 2 - 1
    np.testing.assert_allclose(r, r0 * np.exp(2 * z[:, -1]), rtol=1e-9)
    # B_n = eta_Z int xi_n > 0, increasing
    assert np.all(np.diff(tr.B.values) > 0)
    assert np.all(np.diff(tr.z_c.values) < 0)
