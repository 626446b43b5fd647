"""Scan & Snap theory: spec Appendix A checks 1-7, closed forms and test values (spec §3-4), the
derived T = inf flow against an independent numpy re-implementation (spec Appendix B)."""

import math

import numpy as np
import pytest
import sympy as sp

from theory import scan_snap as ss
from theory.errors import ConfigError

RNG = np.random.default_rng(1)


# ---------------------------------------------------------------- independent numpy references
def reference_flow(task, Y, Z, eta_Y, eta_Z):
    """spec Appendix B: the T = inf ascent flow on full parameters (typed from the spec)."""
    K = task.K
    c = task.P * np.exp(Z[task.query])
    F = c / np.linalg.norm(c, axis=1, keepdims=True)
    gY, gZ = np.zeros_like(Y), np.zeros_like(Z)
    for n in range(K):
        a = Y.T @ F[n]
        a = np.exp(a - a.max())
        a /= a.sum()
        e = np.zeros(task.M_out)
        e[task.label[n]] = 1
        gY += np.outer(F[n], e - a) / K
        g = Y @ (e - a)
        gZ[task.query[n]] += F[n] * (g - F[n] * (F[n] @ g)) / K
    return eta_Y * gY, eta_Z * gZ


def minimal_numeric_point(rng):
    inst = ss.minimal_instance()
    vals = {}
    for n in range(2):
        p = rng.random(3) + 0.1
        p /= p.sum()
        for sym, v in zip(inst["P_rows"][n].values(), p):
            vals[sym] = v
    for s in inst["z"].values():
        vals[s] = rng.normal()
    for s in inst["Y"].values():
        vals[s] = rng.normal()
    return inst, vals


# ---------------------------------------------------------------- Appendix A, checks 1-2
def test_A1_z_gradient_is_f_times_projected_backprop():
    """dJ/dz = sum_n pi_n f_n o (P_perp_{f_n} Y (e_n - alpha_n)), derived gradient vs the formula."""
    inst = ss.minimal_instance()
    # chain-rule factor, symbolically: dJ/df_n = pi_n Y (e_n - alpha_n)
    for n in range(2):
        f = inst["f_symbols"][n]
        w = [sum(inst["Y"][(l, k)] * f[l] for l in f) for k in inst["cols"]]
        den = sum(sp.exp(x) for x in w)
        for l in f:
            backprop = sum(inst["Y"][(l, k)] * ((1 if i == n else 0) - sp.exp(w[i]) / den)
                           for i, k in enumerate(inst["cols"]))
            assert sp.simplify(inst["dJ_df"][n][l] - sp.Rational(1, 2) * backprop) == 0
    # full z-gradient at random points (float64, 1e-12)
    syms = sorted(inst["J"].free_symbols, key=str)
    toks = inst["tokens"]
    dz = sp.lambdify(syms, [inst["dJ_dz"][l] for l in toks], "numpy")
    fl = sp.lambdify(syms, [[inst["f"][n].get(l, 0) for l in toks] for n in range(2)], "numpy")
    for _ in range(5):
        inst, vals = minimal_numeric_point(RNG)
        args = [vals[s] for s in syms]
        derived = np.array(dz(*args), dtype=float)
        formula = np.zeros(5)
        Y = np.array([[vals[inst["Y"][(l, k)]] for k in inst["cols"]] for l in toks])
        for n in range(2):
            f = np.array(fl(*args)[n], dtype=float)
            a = np.exp(Y.T @ f)
            a /= a.sum()
            e = np.eye(3)[n]
            g = Y @ (e - a)
            formula += 0.5 * f * (g - f * (f @ g))
        np.testing.assert_allclose(derived, formula, rtol=1e-12, atol=1e-14)


def test_A2_row_sum_invariants():
    inst = ss.minimal_instance()
    assert sp.cancel(sp.together(sum(inst["dJ_dY"][("a1", k)] for k in inst["cols"]))) == 0
    syms = sorted(inst["J"].free_symbols, key=str)
    zsum = sp.lambdify(syms, sum(inst["dJ_dz"].values()), "numpy")
    ysum = sp.lambdify(syms, [sum(inst["dJ_dY"][(l, k)] for k in inst["cols"]) for l in inst["tokens"]], "numpy")
    for _ in range(5):
        inst, vals = minimal_numeric_point(RNG)
        args = [vals[s] for s in syms]
        assert abs(zsum(*args)) < 1e-14
        assert np.abs(ysum(*args)).max() < 1e-14


# ---------------------------------------------------------------- Appendix A, check 3 (Theorem 2)
def test_A3_theorem2_signs_and_xi():
    """With g_n = gamma F (F^T F)^{-1} e_n: DT components = xi_n f_l^2, CT = -(1 - f_c^2) xi_n < 0."""
    fc1, fa1, fa2, fc2, fb1, fb2, gam = sp.symbols("f_c1 f_a1 f_a2 f_c2 f_b1 f_b2 gamma", positive=True)
    F = sp.Matrix([[fc1, fc2], [fa1, 0], [fa2, 0], [0, fb1], [0, fb2]])
    G = F.T * F
    unit = {fa2: sp.sqrt(1 - fc1**2 - fa1**2), fb2: sp.sqrt(1 - fc2**2 - fb1**2)}  # |f_n| = 1
    Ginv = G.subs(unit).inv()
    zdot_c = 0
    for n in range(2):
        f = F[:, n]
        g = gam * F * Ginv[:, n]
        comp = sp.Matrix([f[i] * (g[i] - f[i] * (f.T * g)[0]) for i in range(5)]).subs(unit)
        xi = gam * (Ginv[n, n] - 1)
        dts = [1, 2] if n == 0 else [3, 4]
        for i in dts:
            assert sp.simplify(comp[i] - xi * f[i].subs(unit) ** 2) == 0
        assert sp.simplify(comp[0] + (1 - f[0] ** 2) * xi) == 0  # Eqn. 100 per class
        zdot_c += comp[0]
    # sign on random unit-norm instances: xi > 0, CT < 0
    fn = sp.lambdify((fc1, fa1, fc2, fb1, gam), zdot_c, "numpy")
    for _ in range(200):
        a, b = RNG.random(2) * 0.6 + 0.05
        c, d = RNG.random(2) * 0.6 + 0.05
        assert fn(a, b, c, d, 1.0) < 0


def test_A3_compact_form_equals_eqn10_with_beta_E_prime():
    """Eqn. 10 with beta_{nn'} = E'_{nn'} equals the compact form (spec §3.2), random F."""
    for _ in range(10):
        M, K = 12, 4
        F = RNG.random((M, K))
        F /= np.linalg.norm(F, axis=0)
        G = F.T @ F
        Ginv = np.linalg.inv(G)
        Ep = np.eye(K) - Ginv
        for n in range(K):
            eqn10 = F[:, n] * sum(Ep[n, k] * ((F[:, n] @ F[:, k]) * F[:, n] - F[:, k]) for k in range(K) if k != n)
            compact = F[:, n] * (F @ Ginv[:, n] - F[:, n])
            np.testing.assert_allclose(eqn10, compact, atol=1e-12)
            xi_sum = sum(Ep[n, k] * F[:, n] @ F[:, k] for k in range(K) if k != n)
            assert math.isclose(xi_sum, Ginv[n, n] - 1, rel_tol=1e-10)


# ---------------------------------------------------------------- Appendix A, checks 4-7
def test_A4_scanning_invariant():
    inst = ss.minimal_instance()
    kappa = sp.Symbol("kappa", positive=True)
    f = inst["f"][0]
    z = inst["z"]
    Pa1, Pa2 = inst["P_rows"][0]["a1"], inst["P_rows"][0]["a2"]
    expr = (1 - sp.exp(-2 * z["a1"])) / Pa1**2 - (1 - sp.exp(-2 * z["a2"])) / Pa2**2
    ddt = sp.diff(expr, z["a1"]) * kappa * f["a1"] ** 2 + sp.diff(expr, z["a2"]) * kappa * f["a2"] ** 2
    assert sp.simplify(ddt) == 0


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


# ---------------------------------------------------------------- spec test values
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


def test_reference_entropies_and_initial_loss():
    cfg = ss.Config()
    task = ss.make_task(cfg)
    Y = np.zeros((task.M_in, task.M_out))
    Z = np.zeros((task.M_in, task.M_in))
    obs = ss.observables_from_parameters(Y, Z, task)
    assert math.isclose(obs["dt_entropy"], 2.151, abs_tol=5e-4)
    assert math.isclose(obs["population_loss"], math.log(34), rel_tol=1e-12)
    assert math.isclose(math.log(34), 3.526, abs_tol=5e-4)
    # P^2 profile (z = log P on the DTs) -> 1.921
    Z[task.query[0], task.dt[0]] = np.log(task.P[0, task.dt[0]])
    assert math.isclose(ss.entropy(task.P[0, task.dt[0]] ** 2), 1.921, abs_tol=5e-4)
    assert math.isclose(ss.observables_from_parameters(Y, Z, task)["dt_entropy"], (2.151 + 1.921) / 2, abs_tol=1e-3)


# ---------------------------------------------------------------- the derived T = inf flow
@pytest.mark.parametrize("layout", [dict(num_unique_per_next=4, num_common=3),
                                    dict(num_last=3, num_next_per_last=2, num_unique_per_next=3, num_common=2),
                                    dict(num_last=1, num_next_per_last=2, vocab="paper", num_unique_per_next=3)])
def test_full_flow_equals_numpy_reference(layout):
    cfg = ss.Config(eta_Y=2.0, eta_Z=0.7, **layout)
    task = ss.make_task(cfg)
    sysm = ss.full_system(cfg)
    f = sysm.to_numpy()
    p = sysm.parameter_vector(ss.full_parameters(cfg))
    obs = sysm.observables_numpy()
    for _ in range(3):
        y = RNG.normal(size=len(sysm.state)) * 0.5
        Y, Z = ss.embed_symmetric_state(task, y)
        dY, dZ = reference_flow(task, Y, Z, cfg.eta_Y, cfg.eta_Z)
        gY, gZ = ss.embed_symmetric_state(task, f(0.0, y, p))
        np.testing.assert_allclose(gY, dY, atol=1e-13)
        np.testing.assert_allclose(gZ, dZ, atol=1e-13)
        # sympy observables == independent numpy observables of the embedded parameters
        o_sym = obs(y[None], p)
        o_np = ss.observables_from_parameters(Y, Z, task)
        for k in ("dt_entropy", "support_entropy", "population_loss", "correct_prob"):
            assert math.isclose(float(o_sym[k][0]), float(o_np[k]), rel_tol=1e-11), k


def test_general_system_on_tiny_instance_non_symmetric_states():
    cfg = ss.Config(num_last=1, num_next_per_last=2, num_common=1, num_unique_per_next=2, eta_Y=1.5, eta_Z=0.8)
    task = ss.make_task(cfg)
    sysm = ss.general_system(cfg)
    f = sysm.to_numpy()
    p = sysm.parameter_vector(ss.full_parameters(cfg))
    for _ in range(3):
        y = RNG.normal(size=len(sysm.state))
        Y, Z = ss.unpack_general_state(task, y)
        dY, dZ = reference_flow(task, Y, Z, cfg.eta_Y, cfg.eta_Z)
        gY, gZ = ss.unpack_general_state(task, f(0.0, y, p))
        rows = task.union_support
        np.testing.assert_allclose(gY[rows][:, task.label], dY[rows][:, task.label], atol=1e-13)
        np.testing.assert_allclose(gZ, dZ, atol=1e-13)


def test_full_ode_backends_agree_and_invariants_and_theorem2():
    import simulate as sim

    cfg = ss.Config(steps=40, log_every=4, momentum=0.0, eta_Y=1.0, eta_Z=1.0, num_unique_per_next=5, num_common=4)
    prob = ss.problem(cfg)
    np.testing.assert_array_equal(prob.t, cfg.ode_times())
    a = sim.solve(prob, backend="scipy")
    b = sim.solve(prob, backend="diffrax")
    for n in prob.system.state_names:
        np.testing.assert_allclose(a[n].values, b[n].values, rtol=1e-6, atol=1e-9)
    task = ss.make_task(cfg)
    Yall = np.stack([a[n].values for n in prob.system.state_names], -1)
    Y, Z = ss.embed_symmetric_state(task, Yall)
    assert np.abs(Y.sum(-1)).max() < 1e-9 and np.abs(Z.sum(-1)).max() < 1e-9  # row sums stay 0
    # Theorem 2 signs: DT logits rise, the common-token logit falls
    assert np.all(np.diff(a.z_c.values) < 0)
    for j in range(5):
        assert np.all(np.diff(a[f"z_dt_{j}"].values) > 0)
    # scanning order: the most probable DT gains the most
    last = [a[f"z_dt_{j}"].values[-1] for j in range(5)]
    assert np.all(np.diff(last) > 0)


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
    assert np.abs(I / I[:, :1] - 1).max() < 1e-7  # spec §3.4 item 1, exact in the reduced ODE
    # Eqn. 11: r_{l/l'}(t) = r(0) chi_l(t) with f^2 ratios from the current logits
    c = P * np.exp(z)
    r = c[:, -1] ** 2 / c[:, 0] ** 2 - 1
    r0 = P[-1] ** 2 / P[0] ** 2 - 1
    np.testing.assert_allclose(r, r0 * np.exp(2 * z[:, -1]), rtol=1e-9)
    # B_n = eta_Z int xi_n > 0, increasing
    assert np.all(np.diff(tr.B.values) > 0)
    assert np.all(np.diff(tr.z_c.values) < 0)


def test_variants_and_presets():
    """One variant field (the data path), checked by ParamsBase; the presets are the regimes the
    comparison's statements assume."""
    assert list(ss.Config.VARIANTS) == ["counts", "sequences"]
    assert ss.Config().replace(variant="sequences").variant == "sequences"
    with pytest.raises(ConfigError) as e:
        ss.Config(variant="tokens")
    assert e.value.field == "variant"
    with pytest.raises(ConfigError) as e:
        ss.Config.preset("paper")
    assert e.value.field == "preset"
    for name in ss.Config.PRESETS:
        for quick in (True, False):
            ss.Config.preset(name, quick)  # every preset is a valid config
    theory = ss.Config.preset("theory", quick=True)
    # inside the theory's regime: zero init, plain SGD (ODE time = step), count vectors, T >> |supp|
    assert theory.zero_init and theory.momentum == 0.0 and theory.variant == "counts" and theory.T == 4096
    np.testing.assert_array_equal(theory.ode_times(), theory.log_steps())
    official = ss.Config.preset("official", quick=False)  # the official Fig. 4 run (spec §5.3)
    assert (official.T, official.batch, official.momentum, official.steps, official.K) == (128, 128, 0.9, 100, 2)
    fig6 = ss.Config.preset("fig6", num_last=3)  # Syn-Medium, default init (spec §5.4)
    assert (fig6.K, fig6.zero_init, fig6.steps, fig6.M_out) == (6, False, 100, 79)
    assert ss.Config.preset("theory", quick=False, steps=7).steps == 7


def test_config_validation():
    for kw, field in ((dict(num_unique_per_next=0), "num_unique_per_next"), (dict(eta_Y=0.0), "eta_Y"),
                      (dict(eta_Z=-1.0), "eta_Z"), (dict(M=1, num_last=2), "M"), (dict(T=1), "T"),
                      (dict(vocab="x"), "vocab"), (dict(momentum=1.0), "momentum"), (dict(num_last=0), "num_last")):
        with pytest.raises(ConfigError) as e:
            ss.Config(**kw)
        assert e.value.field == field
