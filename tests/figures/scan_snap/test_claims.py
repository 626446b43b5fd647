"""figures/scan_snap/claims.toml + claims.py: per claim, the theory's own trajectory passes its
criterion at every in-regime point of the quick map and a planted violation fails; the regime
quantities and the promised error against closed forms; the statistics on hand-made trajectories."""

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
    # the SDE's own claim (issue 20) last: tests/figures/scan_snap/test_calibration.py
    assert reg.names == ["reduced_ode_matches_training", "scan_then_snap", "entropy_falls_with_eta_z",
                         "sde_finite_t_shift"]
    for spec in reg.claims[:3]:
        quick, full = plan_claim(spec, quick=True), plan_claim(spec, quick=False)
        assert quick.inside >= 3 and len(quick.seeds) >= 5  # grade B is reachable in quick mode
        assert full.inside >= 6 and len(full.seeds) >= 12  # grade A in full mode


def test_regime_quantities_against_closed_forms():
    """Syn-Small: E = [[0, rho], [rho, 0]] with rho = 10 c^2 / (10 c^2 + sum u^2), u = linspace(.1, 1, 10)
    (the official generator's weights), eigenvalues +-rho; Assumption 2 needs rho < 1/2 and rho >=
    sqrt(6/34). E' = I - (I + E)^-1 has off-diagonal rho/(1 - rho^2)."""
    u2 = float((np.linspace(0.1, 1.0, 10) ** 2).sum())
    for c in (0.55, 1.0):
        cfg = ss.Config(common_prob=c, eta_Y=0.9, eta_Z=0.03)
        rho = 10 * c**2 / (10 * c**2 + u2)
        np.testing.assert_allclose(C.overlap_eigenvalues(cfg), [-rho, rho], rtol=1e-12)
        q = C.claim_quantities(cfg, {})
        assert q["ratio"] == pytest.approx(30.0)
        assert q["K_lambda_max"] == pytest.approx(2 * rho)
        assert q["lambda_min_over_bound"] == pytest.approx(rho / math.sqrt(6 / 34))
        assert C.promised_error(cfg) == pytest.approx(1 / 33 + 3 * (1 - rho**2) / (34 * rho))
    assert C.claim_quantities(ss.Config(common_prob=0.55), {})["K_lambda_max"] < 1  # the in-regime task
    assert C.claim_quantities(ss.Config(common_prob=1.0), {})["K_lambda_max"] > 1  # Syn-Small: outside
    # Theorem 4's validity at t0 = 2 K ln M / eta_Y: 4 Gamma(t0)/C_0 (Eqn. 128 with h of Eqn. 45)
    cfg = ss.Config(eta_Y=1.0, eta_Z=0.1)
    t0 = 2 * 2 * math.log(34)
    h = ss.h_closed_form(t0 / 2, 34, 1.0)
    assert C.claim_quantities(cfg, {})["snap_validity"] == pytest.approx(4 * 0.1 * 2 * 33**2 * h**2 / 2)


# ---------------------------------------------------------------------------------------------
# reduced_ode_matches_training
# ---------------------------------------------------------------------------------------------
def test_reduced_claim_theory_passes_and_slower_attention_fails(reg):
    spec = reg.get("reduced_ode_matches_training")
    check = theory_check(spec)
    assert check.holds, str(check)
    assert len(check.points) == 6
    cfg = spec.protocol.config(ss.Config, True).replace(eta_Z=0.03)
    run = C.eta_Z_time_config(cfg)
    assert run.steps == 3334 and run.log_every == 8  # 100 units of 1/eta_Z, 4 logs per unit
    red = C.reduced_theory(cfg)
    # planted: the attention moves at half the reduced ODE's speed (relative error |dz_red - dz|/|dz| = 1,
    # 5.2 promised errors)
    half = red.assign({n: red[n] * 0.5 for n in ("z_c", *[f"z_dt_{j}" for j in range(10)])})
    assert C.reduced_error(half, cfg, horizon=30) == pytest.approx(1.0 / C.promised_error(cfg), rel=1e-9)
    assert planted_violation(spec, half, config=cfg, horizon=30).verdict == "fails"
    rng = np.random.default_rng(0)
    noisy = [half.assign(z_c=half["z_c"] * (1 + 1e-3 * rng.normal())) for _ in range(5)]
    assert planted_violation(spec, noisy, config=cfg, horizon=100).verdict == "fails"


# ---------------------------------------------------------------------------------------------
# scan_then_snap
# ---------------------------------------------------------------------------------------------
def test_snap_statistic_of_theorem_4_closed_form():
    """On Theorem 4's own trajectory the fall ratio is ln-ratios of 1 + 4 Gamma/C_0 at a, sqrt(10) a,
    10 a; below 1 from t0 on; above 1 for windows well before t0 (the scanning phase accelerates)."""
    cfg = ss.Config(eta_Y=1.0, eta_Z=0.1, momentum=0.0, steps=1420, log_every=1)
    th = C.snap_theory(cfg)
    t0 = ss.transition_times(34, 2, 1.0)[1]
    for start in (1.0, 3.16, 10.0):
        a = start * t0
        G = ss.Gamma_of_t(np.array([a, math.sqrt(10) * a, 10 * a]), 34, 2, 1.0, 0.1)
        B = 0.25 * np.log1p(4 * G)
        want = (B[2] - B[1]) / (B[1] - B[0])
        assert C.snap_deceleration(th, cfg, start=start) == pytest.approx(want, rel=2e-3)  # step-logged interp
        assert want < 1
    assert C.snap_deceleration(th, cfg, start=0.1) > 1
    assert math.isnan(C.snap_deceleration(th, cfg, start=20.0))  # 10 a beyond the run


def test_snap_claim_theory_passes_and_steady_scanning_fails(reg):
    spec = reg.get("scan_then_snap")
    check = theory_check(spec)
    assert check.holds, str(check)
    assert len(check.points) == 4  # eta_Y/eta_Z = 10, 33 x windows from t0 and 3.16 t0
    cfg = spec.protocol.config(ss.Config, True).replace(eta_Z=0.1)
    t = cfg.ode_times()
    # planted: the common logit keeps falling at a constant speed (no snap): ratio sqrt(10)
    linear = xr.Dataset({"z_c": ("time", -1e-3 * t)}, coords={"time": t})
    assert C.snap_deceleration(linear, cfg, start=1.0) == pytest.approx(math.sqrt(10))
    assert planted_violation(spec, linear, config=cfg, start=1.0).verdict == "fails"
    # steady scanning, z_c = -ln t (B ~ ln t, as before t0): ratio 1 exactly -> not "holds"
    log_t = xr.Dataset({"z_c": ("time", -np.log1p(t))}, coords={"time": t})
    assert planted_violation(spec, log_t, config=cfg, start=10.0).verdict != "holds"


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
