"""linattn derivation (theory/linattn/derive.py) against the numpy population model (theory/linattn/population.py,
written from the matrix form of the loss, not from sympy), a Monte-Carlo estimate of the loss, finite differences,
and the integrated flow (spec docs/papers/linattn.md §3)."""

import itertools

import numpy as np
import pytest
import sympy as sp

from theory.linattn import derive, population

RNG = np.random.default_rng(7)


def _lam(D, rng=RNG):
    return np.sort(rng.uniform(0.2, 2.0, D))[::-1]


def test_isserlis_loss_equals_matrix_form_for_a_full_gamma():
    D = 3
    L = derive.population_loss(D, diagonal=False)
    G = [sp.Symbol(f"G_{i + 1}_{j + 1}", real=True) for i in range(D) for j in range(D)]
    f = sp.lambdify((G, derive.lam_symbols(D), derive.Nc), L, "numpy")
    for _ in range(5):
        Gam, lam, N = RNG.normal(size=(D, D)), _lam(D), float(RNG.integers(1, 50))
        want = population.loss_of_gamma(Gam, lam, N)
        assert f(Gam.ravel(), lam, N) == pytest.approx(want, rel=1e-12)


def test_loss_matches_a_monte_carlo_estimate():
    """The closed form against sampled sequences (the data model of spec §1), within 5 standard errors."""
    D, N, S = 2, 3, 400_000
    rng = np.random.default_rng(0)
    lam, Gam = np.array([1.5, 0.5]), np.array([[0.4, 0.2], [-0.3, 0.9]])
    w = rng.normal(size=(S, D)) / np.sqrt(D)
    x = rng.normal(size=(S, N, D)) * np.sqrt(lam)
    xq = rng.normal(size=(S, D)) * np.sqrt(lam)
    y = np.einsum("snd,sd->sn", x, w)
    c = np.einsum("sn,snd->sd", y, x) / N
    err = 0.5 * (np.einsum("sd,sd->s", w, xq) - np.einsum("si,ij,sj->s", c, Gam, xq)) ** 2
    se = err.std() / np.sqrt(S)
    assert abs(err.mean() - population.loss_of_gamma(Gam, lam, N)) < 5 * se


def test_off_diagonal_gradient_vanishes_on_the_diagonal_set():
    D = 3
    L = derive.population_loss(D, diagonal=False)
    G = {(i, j): sp.Symbol(f"G_{i + 1}_{j + 1}", real=True) for i in range(D) for j in range(D)}
    on = {G[i, j]: 0 for i in range(D) for j in range(D) if i != j}
    for (i, j), s in G.items():
        if i != j:
            assert sp.expand(sp.diff(L, s).xreplace(on)) == 0


def _merged_point(D, H, rng=RNG):
    v, u = rng.normal(size=H), rng.normal(size=(H, D))
    return v, np.stack([np.diag(r) for r in u]), np.concatenate([np.r_[v[h], u[h]] for h in range(H)])


def test_merged_flow_equals_numpy_gradient_at_random_points():
    D, H = 3, 2
    f = derive.merged_system(D, H).to_numpy()
    for _ in range(5):
        lam, N = _lam(D), float(RNG.integers(1, 40))
        v, U, y = _merged_point(D, H)
        dv, dU = population.merged_gradient(v, U, lam, N)
        want = np.concatenate([np.r_[-dv[h], -np.diagonal(dU[h])] for h in range(H)])
        got = f(0.0, y, np.r_[lam, N])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        off = dU - np.stack([np.diag(np.diagonal(m)) for m in dU])
        assert np.abs(off).max() < 1e-14  # the diagonal set is invariant


def _separate_point(D, H, R, rng=RNG):
    comp = derive.assignment(D, H, R)
    v, a, b = rng.normal(size=H), rng.normal(size=(H, R)), rng.normal(size=(H, R))
    K, Q = np.zeros((H, R, D)), np.zeros((H, R, D))
    for h, r in itertools.product(range(H), range(R)):
        K[h, r, comp[h][r]], Q[h, r, comp[h][r]] = a[h, r], b[h, r]
    return v, K, Q, np.concatenate([np.r_[v[h], a[h], b[h]] for h in range(H)]), comp


@pytest.mark.parametrize("H,R", [(3, 1), (2, 2), (4, 1)])
def test_separate_flow_equals_numpy_gradient_at_random_points(H, R):
    D = 3
    f = derive.separate_system(D, H, R).to_numpy()
    for _ in range(4):
        lam, N = _lam(D), float(RNG.integers(1, 40))
        v, K, Q, y, comp = _separate_point(D, H, R)
        dv, dK, dQ = population.separate_gradient(v, K, Q, lam, N)
        want = np.concatenate([np.r_[-dv[h], [-dK[h, r, comp[h][r]] for r in range(R)],
                                      [-dQ[h, r, comp[h][r]] for r in range(R)]] for h in range(H)])
        np.testing.assert_allclose(f(0.0, y, np.r_[lam, N]), want, rtol=1e-10, atol=1e-12)
        mask = np.zeros_like(K, dtype=bool)
        for h, r in itertools.product(range(H), range(R)):
            mask[h, r, comp[h][r]] = True
        assert np.abs(dK[~mask]).max(initial=0) < 1e-14 and np.abs(dQ[~mask]).max(initial=0) < 1e-14


def test_flow_is_minus_finite_difference_gradient_of_the_sympy_loss():
    """The chain rule through the definitions, against central differences of L(γ(θ)) itself."""
    D, H, R = 3, 2, 2
    sysm = derive.separate_system(D, H, R)
    L = sysm.expand_definitions(sysm.observables["loss"])
    lossf = sp.lambdify((sysm.state, sysm.parameters), L, "numpy")
    f = sysm.to_numpy()
    y, p = RNG.normal(size=len(sysm.state)), np.r_[_lam(D), 7.0]
    h = 1e-6
    fd = np.array([(lossf(y + h * e, p) - lossf(y - h * e, p)) / (2 * h) for e in np.eye(len(y))])
    np.testing.assert_allclose(f(0.0, y, p), -fd, rtol=1e-7, atol=1e-9)


def test_optimum_and_plateau_levels_match_numpy():
    D = 3
    lam, N = _lam(D), 11.0
    sub = {**dict(zip(derive.lam_symbols(D), lam)), derive.Nc: N}
    np.testing.assert_allclose([float(e.subs(sub)) for e in derive.optimum(D)], population.optimum(lam, N),
                               rtol=1e-13)
    np.testing.assert_allclose([float(e.subs(sub)) for e in derive.plateau_levels(D)],
                               population.plateau_levels(lam, N), rtol=1e-13)
    # large N: Γ* -> Λ^-1 (in-context least squares) and the last level -> 0
    assert population.optimum(lam, 1e9) == pytest.approx(1 / lam, rel=1e-7)
    assert population.plateau_levels(lam, 1e9)[-1] == pytest.approx(0, abs=1e-8)


def test_separate_has_two_to_the_D_fixed_points_merged_only_two():
    """Spec §3.1-§3.2: every γ_i in {0, γ_i*} is a fixed point of the separate flow; for the merged flow a
    partly learned Γ is not (its shared value keeps moving), only Γ = 0 (v = 0, u ⊥ λ^2) and Γ = Γ*."""
    D = 3
    lam, N = _lam(D), 9.0
    p, opt = np.r_[lam, N], population.optimum(lam, N)
    f = derive.component_system(D).to_numpy()
    for learned in itertools.product([0, 1], repeat=D):
        s = np.cbrt(np.where(learned, opt, 0.0))
        assert np.abs(f(0.0, s, np.r_[p, 0.01])).max() < 1e-13
    fm = derive.merged_system(D, 1).to_numpy()
    u = np.array([lam[1] ** 2, -lam[0] ** 2, 0.0])  # u ⊥ (λ_i^2): the saddle Γ = 0
    assert np.abs(fm(0.0, np.r_[0.0, u], p)).max() < 1e-13
    assert np.abs(fm(0.0, np.r_[1.0, opt], p)).max() < 1e-13           # Γ = Γ*
    partial = np.r_[1.0, opt[0], 0.0, 0.0]                             # only component 1 learned
    assert np.abs(fm(0.0, partial, p)).max() > 1e-2


def test_component_system_is_the_balanced_separate_flow():
    D = 3
    comp, full = derive.component_system(D).to_numpy(), derive.separate_system(D, D, 1).to_numpy()
    s, p = RNG.uniform(0.1, 1.0, D), np.r_[_lam(D), 5.0]
    y = np.concatenate([[si, si, si] for si in s])  # v_h = a_h = b_h = s_h
    dfull = full(0.0, y, p).reshape(D, 3)
    np.testing.assert_allclose(dfull, np.repeat(comp(0.0, s, np.r_[p, 0.01])[:, None], 3, 1), rtol=1e-12)


def test_escape_time_is_the_leading_order_of_the_integrated_plateau():
    """t_half(s0) - D/(λ^2 s0) stays O(1) as s0 -> 0: a wrong prefactor would grow like 1/s0."""
    import simulate

    D = 2
    sysm = derive.component_system(D)
    lam, N = np.array([1.0, 0.5]), 10.0
    esc = sysm.closed_forms_numpy()
    gaps = []
    for s0 in (1e-2, 1e-3):
        p = np.r_[lam, N, s0]
        T1 = float(esc(0.0, p)["escape_1"])
        assert T1 == pytest.approx(D / (lam[0] ** 2 * s0), rel=1e-12)
        t = np.linspace(0, 1.5 * T1, 3001)
        tr = simulate.solve(sysm, dict(zip(sysm.parameter_names, p)), [s0, s0], t, backend="scipy",
                            method="Radau", rtol=1e-10, atol=1e-14)
        g1 = tr["gamma_1"].values
        t_half = np.interp(0.5 * population.optimum(lam, N)[0], g1, t)
        gaps.append(t_half - T1)
    assert abs(gaps[1] - gaps[0]) < 1e-2 * D / (lam[0] ** 2 * 1e-3)
    assert abs(gaps[1]) < 0.05 * D / (lam[0] ** 2 * 1e-3)


def test_isotropic_closed_form_equals_the_integrated_merged_flow():
    """Spec §3.1: Λ = λ I, one head, U = u I, v = sqrt(D) u: the logistic closed form against simulate.solve of
    the full merged flow (every component, the shared value), to the solver's tolerance."""
    import simulate

    D, lamv, N, u0 = 3, 0.8, 12.0, 0.05
    iso, full = derive.isotropic_system(D), derive.merged_system(D, 1)
    g0 = np.sqrt(D) * u0 ** 2
    p_iso = np.array([lamv, N, g0])
    T = float(iso.closed_forms_numpy()(0.0, p_iso)["drop_time"])
    t = np.linspace(0, 2.5 * T, 400)
    tr = simulate.solve(full, {**{f"lam_{i + 1}": lamv for i in range(D)}, "N": N}, np.r_[np.sqrt(D) * u0,
                        np.full(D, u0)], t, backend="scipy", method="Radau", rtol=1e-11, atol=1e-13)
    cf = iso.closed_forms_numpy()(t, p_iso)
    for i in range(D):
        np.testing.assert_allclose(tr[f"gamma_{i + 1}"].values, cf["gamma"], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(tr["loss"].values, cf["loss"], rtol=1e-8)
    # the drop: from L_0 to the optimum, half-way in gamma at the closed form's drop_time
    lev = population.plateau_levels(np.full(D, lamv), N)
    assert tr["loss"].values[0] == pytest.approx(lev[0], rel=1e-2) and tr["loss"].values[-1] == pytest.approx(
        lev[-1], rel=1e-3)
    gstar = population.optimum(np.full(D, lamv), N)[0]
    assert np.interp(T, t, tr["gamma_1"].values) == pytest.approx(0.5 * gstar, rel=1e-2)


def test_systems_export():
    from theory import load_system

    for s in derive.systems():
        assert load_system(s.to_json()).equivalent(s)
        assert len(s.to_latex()) < 20_000


@pytest.mark.parametrize("H,R,learned", [(2, 1, 2), (1, 3, 3), (1, 2, 2)])
def test_heads_and_rank_bound_the_number_of_components_learned(H, R, learned):
    """Spec §3.2: H rank-R heads learn min(H R, D) components; the loss ends at the PCR level L_{H R}."""
    import simulate

    D, lam, N, s0 = 3, np.array([1.0, 0.7, 0.5]), 8.0, 0.1
    sysm = derive.separate_system(D, H, R)
    y0 = np.full(len(sysm.state), s0)
    t = np.linspace(0, 40 * D / (lam[-1] ** 2 * s0), 50)
    tr = simulate.solve(sysm, {**{f"lam_{i + 1}": x for i, x in enumerate(lam)}, "N": N}, y0, t, backend="scipy",
                        method="Radau", rtol=1e-9, atol=1e-12)
    assert tr["loss"].values[-1] == pytest.approx(population.plateau_levels(lam, N)[learned], rel=1e-4)
