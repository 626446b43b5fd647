"""figures/scan_snap/claims.toml, snap_claims.toml + claims.py: the regime quantities against closed
forms, Theorem 1's error terms, C_0 fitted on the exact flow, the theory checks on the exact flow
(not 0 by construction), planted violations, the statistics on hand-made trajectories."""

import math

import numpy as np
import pytest
import xarray as xr

from figures.claims import plan_claim, planted_violation, registry, theory_check
from figures.scan_snap import claims as C
from theory import scan_snap as ss


@pytest.fixture(scope="module")
def reg():
    return registry("scan-snap")


def test_registry_claims_and_their_maps_reach_inside_and_outside_the_regime(reg):
    # the SDE's own claim last: tests/figures/scan_snap/test_calibration.py; Theorem 4's
    # claim is concluded outside the registry (snap_claims.toml: no runnable in-regime point)
    assert reg.names == ["reduced_ode_matches_training", "entropy_falls_with_eta_z", "sde_finite_t_shift"]
    for spec in reg.claims[:2]:
        quick, full = plan_claim(spec, quick=True), plan_claim(spec, quick=False)
        assert quick.inside >= 1 and len(quick.seeds) >= 5
        assert full.inside >= quick.inside and len(full.seeds) >= 12
        assert spec.null is not None and spec.demos and spec.theory_exact


def test_regime_quantities_against_closed_forms():
    """Syn-Small: E = [[0, rho], [rho, 0]] with rho = 10 c^2 / (10 c^2 + sum u^2), u = linspace(.1, 1, 10)
    (the official generator's weights), eigenvalues +-rho; Assumption 2 needs rho < 1/2 and rho >=
    sqrt(6/M). E' = I - (I + E)^-1 has off-diagonal rho/(1 - rho^2)."""
    u2 = float((np.linspace(0.1, 1.0, 10) ** 2).sum())
    for c in (0.55, 1.0):
        for extra in (0, 966):
            cfg = ss.Config(common_prob=c, eta_Y=0.9, eta_Z=0.03, extra_vocab=extra)
            M = 34 + extra
            rho = 10 * c**2 / (10 * c**2 + u2)
            np.testing.assert_allclose(C.overlap_eigenvalues(cfg), [-rho, rho], rtol=1e-12)
            q = C.reduced_quantities(cfg, {})
            assert q["ratio"] == pytest.approx(30.0) and q["M"] == M
            assert q["K_lambda_max"] == pytest.approx(2 * rho)
            assert q["lambda_min_over_bound"] == pytest.approx(rho / math.sqrt(6 / M))
            assert C._Eprime_min(cfg) == pytest.approx(rho / (1 - rho**2))
    assert C.claim_quantities(ss.Config(common_prob=0.55), {})["K_lambda_max"] < 1  # the in-regime task
    assert C.claim_quantities(ss.Config(common_prob=1.0), {})["K_lambda_max"] > 1  # Syn-Small: outside


def test_extra_vocab_enlarges_the_softmax_only():
    cfg = ss.Config(extra_vocab=966)
    task, base = ss.make_task(cfg), ss.make_task(ss.Config())
    assert task.M_out == 1000 and cfg.M_theory == 1000 and task.M_in == base.M_in
    np.testing.assert_array_equal(task.P, base.P)
    np.testing.assert_array_equal(task.label, base.label)
    with pytest.raises(Exception):
        ss.Config(extra_vocab=5, vocab="paper")


# ---------------------------------------------------------------------------------------------
# reduced_ode_matches_training
# ---------------------------------------------------------------------------------------------
def test_reduced_claim_error_terms_and_a_planted_violation(reg):
    spec = reg.get("reduced_ode_matches_training")
    cfg = spec.protocol.config(ss.Config, True).replace(eta_Z=0.09, common_prob=0.55)
    run = C.eta_Z_time_config(cfg)
    assert run.steps == 1112 and run.log_every == 3  # 100 units of 1/eta_Z, ~4 logs per unit
    # Theorem 1's error contains its explicit terms (sigma, theta >= 0 only add to them)
    rho = C._overlap(cfg)[0, 1]
    eps = C.theorem1_error(cfg)
    assert eps >= 1 / 33 + 3 * (1 - rho**2) / (34 * rho) - 1e-12
    red = C._reduced_solution(cfg)
    names = ("z_c", *[f"z_dt_{j}" for j in range(10)])
    # the reduced ODE against itself is 0: the claim's theory check runs the EXACT flow instead, which
    # is not the reduced ODE (its error is not 0 by construction)
    assert C.reduced_error(red, cfg) == 0.0
    exact = C.reduced_theory(cfg)
    assert C.reduced_error(exact, cfg) > 0.05
    # planted: the attention moves at half the reduced ODE's speed (relative error 1 = 1/eps units)
    half = red.assign({n: red[n] * 0.5 for n in names})
    assert C.reduced_error(half, cfg) == pytest.approx(1.0 / eps, rel=1e-9)
    assert planted_violation(spec, half, config=cfg).verdict == "fails"


def test_reduced_ode_with_remark_1_rate_slows_h_by_one_minus_rho():
    """Remark 1: h grows at (1 - E) eta_Y; at t -> 0 (z = 0, E = rho) dh/dt is (1 - rho) x Lemma 3's."""
    from figures.scan_snap.lines import reduced_trajectory

    cfg = ss.Config(common_prob=0.55, eta_Y=0.9, eta_Z=0.09, momentum=0.0)
    t = np.array([0.0, 1e-3])
    a = reduced_trajectory(cfg, t)["h"].values[1]
    b = reduced_trajectory(cfg, t, remark1=True)["h"].values[1]
    rho = C._overlap(cfg)[0, 1]
    assert b / a == pytest.approx(1 - rho, rel=1e-4)


# ---------------------------------------------------------------------------------------------
# scan_then_snap (concluded outside the registry: snap_claims.toml)
# ---------------------------------------------------------------------------------------------
def test_fitted_C0_and_snap_onset_against_the_exact_flow_and_closed_forms():
    cfg = ss.Config(eta_Y=1.0, eta_Z=1.0, momentum=0.0)
    C0 = C.fitted_C0(cfg)
    assert C0 != cfg.C0  # fitted, not the config's constant
    ts = C.snap_onset(cfg)
    G = float(ss.Gamma_of_t(ts, 34, 2, 1.0, 1.0))
    assert 4 * G / C0 == pytest.approx(1.0, rel=1e-9)  # Eqn. 45 inverted in closed form
    # the 1-D snap ODE with the fitted C_0 describes the exact flow's common logit after t0 (fit's spread)
    from figures.scan_snap.lines import theory_trajectory

    t0 = ss.transition_times(34, 2, 1.0)[1]
    t = np.array([0.0, 10 * t0, 100 * t0])
    zc = theory_trajectory(cfg, t)["z_c"].values[1:]
    pred = -0.25 * np.log1p(4 * ss.Gamma_of_t(t[1:], 34, 2, 1.0, 1.0) / C0)
    np.testing.assert_allclose(zc, pred, rtol=0.25)
    q = C.snap_quantities(cfg, {"start": 1.0})
    assert q["snap_validity"] == pytest.approx(1.0) and q["start_over_t0"] == pytest.approx(ts / t0)


def test_snap_statistic_of_theorem_4_closed_form():
    """On Theorem 4's own trajectory (fitted C_0) the fall ratio is ln-ratios of 1 + 4 Gamma/C_0 at a,
    sqrt(10) a, 10 a: below 1 once 4 Gamma(a) >= C_0; above 1 for a window well before the snap
    (z ~ -Gamma/C_0 ~ -ln^2 t accelerates in ln t)."""
    cfg = ss.Config(eta_Y=1.0, eta_Z=1.0, momentum=0.0, steps=10, T=4096, batch=64)
    th = C.theorem4_trajectory(cfg)
    ts, C0 = C.snap_onset(cfg), C.fitted_C0(cfg)
    for start in (0.316, 1.0):
        a = start * ts
        G = ss.Gamma_of_t(np.array([a, math.sqrt(10) * a, 10 * a]), 34, 2, 1.0, 1.0)
        B = 0.25 * np.log1p(4 * G / C0)
        want = (B[2] - B[1]) / (B[1] - B[0])
        assert C.snap_deceleration(th, cfg, start=start) == pytest.approx(want, rel=2e-2)  # logged interp
    assert C.snap_deceleration(th, cfg, start=1.0) < 1
    assert C.snap_deceleration(th, cfg, start=0.01) > 1
    assert math.isnan(C.snap_deceleration(th, cfg, start=2.0))  # 10 a beyond the run
    t = th["time"].values
    linear = xr.Dataset({"z_c": ("time", -1e-3 * t)}, coords={"time": t})
    assert C.snap_deceleration(linear, cfg, start=0.5) == pytest.approx(math.sqrt(10))


@pytest.mark.slow
def test_snap_claim_is_untested_and_its_demos_and_null_run():
    r = C.snap_claim_result(quick=True).to_json()
    assert r["verdict"] == "untested" and "t_s" in r["untested_reason"]
    assert {d["label"] for d in r["demo"]} == {"Fig. 4 left: eta_Y = eta_Z = 1", "Fig. 4 right: eta_Y = 10, eta_Z = 1"}
    assert all(not d["inside"] for d in r["demo"])
    assert r["null"]["values"] and r["null"]["verdict"] != "holds"


# ---------------------------------------------------------------------------------------------
# entropy_falls_with_eta_z
# ---------------------------------------------------------------------------------------------
def test_entropy_claim_theory_passes_and_a_rising_entropy_fails(reg):
    spec = reg.get("entropy_falls_with_eta_z")
    check = theory_check(spec)
    assert check.holds, str(check)
    assert len(check.points) == 6
    etas = np.array([0.5, 1.0, 2.0, 3.0])
    rng = np.random.default_rng(1)
    rising = [xr.Dataset({"dt_entropy": ("eta_Z", 1.9 + 0.05 * np.log(etas) + 0.01 * rng.normal(size=4))},
                         coords={"eta_Z": etas}) for _ in range(5)]
    assert C.entropy_slope(rising[0], None) == pytest.approx(0.05, abs=0.03)
    assert planted_violation(spec, rising).verdict == "fails"


def test_fig6_runs_are_the_seeds_of_the_official_grid():
    """One call: every eta_Z x seed; run (s, k) is the engine run from default_rng([s, k]) alone."""
    from empirical.scan_snap.fast import CountSGD

    cfg = ss.Config.preset("fig6", num_last=1, eta_Z=1.0, eta_Y=2.0, steps=5)
    ds = C.fig6_runs(cfg, seeds=[0, 4])
    assert ds["dt_entropy"].dims == ("seed", "eta_Z") and ds.sizes == {"seed": 2, "eta_Z": 4}
    task = ss.make_task(cfg)
    one = CountSGD(task, [2.0 * 2.0], [2.0], batch=cfg.batch, momentum=0.9, zero_init=False,
                   rng=[np.random.default_rng([4, 2])])
    one.run(5)
    want = ss.observables_from_parameters(one.Y, one.Z, task)["dt_entropy"][0]
    assert ds["dt_entropy"].sel(seed=4, eta_Z=2.0).item() == pytest.approx(want, abs=1e-12)
