"""theory/scan_snap/derive.py: spec Appendix A checks 1-4 on the symbolic minimal instance, the
derived T = inf flow (symmetric and general systems) against an independent numpy re-implementation
(spec Appendix B), and the maps between their states and the full parameters."""

import math

import numpy as np
import pytest
import sympy as sp

from theory import scan_snap as ss


RNG = np.random.default_rng(1)


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
    """Eqn. 10 with beta_{nn'} = E'_{nn'} equals the compact form (docs/papers/scan_snap.md §3.2), random F."""
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


def test_A4_scanning_invariant():
    inst = ss.minimal_instance()
    kappa = sp.Symbol("kappa", positive=True)
    f = inst["f"][0]
    z = inst["z"]
    Pa1, Pa2 = inst["P_rows"][0]["a1"], inst["P_rows"][0]["a2"]
    expr = (1 - sp.exp(-2 * z["a1"])) / Pa1**2 - (1 - sp.exp(-2 * z["a2"])) / Pa2**2
    ddt = sp.diff(expr, z["a1"]) * kappa * f["a1"] ** 2 + sp.diff(expr, z["a2"]) * kappa * f["a2"] ** 2
    assert sp.simplify(ddt) == 0


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
