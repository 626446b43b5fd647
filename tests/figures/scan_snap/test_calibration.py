"""Scan & Snap's SDE against count-vector SGD (figures/scan_snap/calibration.py): the
SDE's claim (theory passes its criterion; planted violations fail), the calibration rows."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from figures.claims import planted_violation, registry, theory_check
from figures.scan_snap import calibration as C

TOML = Path(C.__file__).with_name("claims.toml")


@pytest.fixture(scope="module")
def spec():
    return registry("scan-snap", TOML).get("sde_finite_t_shift")


def _final(H, cfg):
    t = cfg.ode_times()
    return xr.Dataset({"dt_entropy": ("time", np.full(t.size, H))}, coords={"time": t})


def test_the_sde_claim_is_the_last_entry_under_its_marker():
    text = TOML.read_text()
    marker = text.index("# --- the minibatch SDE's finite-T shift ---")
    assert text.index("[claims.sde_finite_t_shift]") > marker
    assert "[claims." not in text[marker:].replace("[claims.sde_finite_t_shift", "")  # the last entry
    assert "[[claims.sde_finite_t_shift.demo]]" in text[marker:] and "[claims.sde_finite_t_shift.null]" in text[marker:]


@pytest.mark.slow
def test_sde_claim_theory_passes_and_planted_violations_fail(spec):
    """The SDE's own paths pass the criterion at every in-regime point of the quick map; runs that
    end at the unshifted T = inf value, or shifted the wrong way, fail."""
    check = theory_check(spec)
    assert check.holds, str(check)
    assert len(check.points) == 3  # T = 32, 128, 1024 at batch 32 (batch 2 lies outside)
    cfg = spec.protocol.config(C.ss.Config, True).replace(T=32)
    h_inf, m = C.population_final(cfg), float(np.median(C._sde_final(cfg)))
    assert abs(m - h_inf) > 0.02  # the finite-T shift at T = 32 (SGD's mean: see the report)
    rng = np.random.default_rng(0)
    unshifted = [_final(h_inf + 0.003 * rng.normal(), cfg) for _ in range(5)]
    assert planted_violation(spec, unshifted, config=cfg).verdict == "fails"
    wrong_way = [_final(h_inf - (m - h_inf) + 0.003 * rng.normal(), cfg) for _ in range(5)]
    assert planted_violation(spec, wrong_way, config=cfg).verdict == "fails"
    assert C.shift_to_spread(cfg) > 1


def test_claim_runs_are_independent_seeded_count_sgd_runs():
    cfg = C.calibration_config(1024).replace(steps=4, log_every=2, batch=8)
    a = C.train_seeds(cfg, seeds=[0, 1, 2])
    b = C.train_seeds(cfg, seeds=[2])
    assert a.sizes["seed"] == 3 and list(a["seed"].values) == [0, 1, 2]
    np.testing.assert_allclose(a["dt_entropy"].sel(seed=2).values, b["dt_entropy"].sel(seed=2).values, rtol=1e-12)
    assert not np.allclose(a["Y_own_0"].values[0], a["Y_own_0"].values[1])
    np.testing.assert_array_equal(a["time"].values, cfg.ode_times())


@pytest.mark.parametrize("t_inf", [False, True])
def test_batched_claim_runs_equal_the_runs_made_one_at_a_time(t_inf):
    """The claim's (and its null's) seeds in one count_sgd_runs call: each seed exactly the
    run made alone from its own generator (seed * 7919 + config.seed), float rounding aside."""
    from empirical.scan_snap.fast import count_sgd_runs

    cfg = C.calibration_config(32).replace(steps=12, log_every=4, batch=8, zero_init=False)
    seeds = [0, 4, 9]
    both = (C.null_runs if t_inf else C.train_seeds)(cfg, seeds=seeds)
    for s in seeds:
        alone = count_sgd_runs(cfg, 1, seed=s * 7919 + cfg.seed, t_inf=t_inf).isel(run=0)
        for k in ("dt_entropy", "Y_own_0", "z_c"):
            np.testing.assert_allclose(both[k].sel(seed=s).values, alone[k].values, rtol=1e-12, atol=1e-14)


def test_sde_figures_pass_the_lint_on_small_sizes(tmp_path, monkeypatch):
    """The SDE figures (calibration, SVAG) are drawn with figures.style and pass the lint; the
    calibration's table carries coverage per level with its interval and the variance ratio."""
    from figures.core import collecting
    from figures.scan_snap import figures as F

    monkeypatch.setitem(C.CALIBRATION, "quick", dict(steps=4, log_every=2, paths=16, runs=8, Ts=(32, 1024)))
    with collecting(strict=True) as written:
        table = F.fig_sde_calibration(tmp_path, True, device="cpu")
        orig = C.svag
        monkeypatch.setattr(C, "svag", lambda quick=True: orig(quick=True, runs=8, paths=16, scales=(1, 2)))
        w = F.fig_svag(tmp_path, False, device="cpu")
    assert written.problems == {}
    assert (tmp_path / "sde_calibration.png").exists() and (tmp_path / "svag_weak_error.png").exists()
    assert set(table["T"]) == {32, 1024} and len(table) == 2 * 4
    assert ((table["coverage_0.9_low"] <= table["coverage_0.9"]) & (table["coverage_0.9"] <= table["coverage_0.9_high"])).all()
    assert list(w.scales) == [1.0, 2.0]
    assert F.fig_svag(None, True, device="cpu") is None


def test_svag_runs_keep_the_mean_and_variance_per_unit_time():
    """SVAG with l = 2 (two steps at eta/2, gradient c1 g1 + c2 g2 of two minibatches) moves the
    Y coordinates over one unit of time with the mean and variance of one plain SGD step
    (small eta: the drift's curvature is negligible), as the SDE limit requires; two plain steps
    at eta/2 (no SVAG coefficients) halve the variance, and the test sees it."""
    from empirical.scan_snap.fast import count_sgd_runs
    from helpers.moments import moment_z_scores

    cfg = C.ss.Config(momentum=0.0, zero_init=True, batch=8, T=32, steps=1, log_every=1, eta_Y=0.05, eta_Z=0.05)
    names = ("Y_own_0", "Y_xlab_0", "Y_c_lab")  # from zero init only Y moves at first order (Z's gradient needs Y)
    one = count_sgd_runs(cfg, 4000, seed=3)
    two = count_sgd_runs(cfg, 4000, seed=4, l=2)
    half = count_sgd_runs(cfg.replace(eta_Y=0.025, eta_Z=0.025, steps=2, log_every=2), 4000, seed=5)
    for n in names:
        a, b, c = (r[n].values[:, -1] - r[n].values[:, 0] for r in (one, two, half))
        z_mean, z_var = moment_z_scores(b, a)
        assert abs(z_mean) < 4.5 and abs(z_var) < 4.5, (n, z_mean, z_var)
        assert moment_z_scores(c, a)[1] < -6, n
