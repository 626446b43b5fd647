"""figures/joma/calibration.py: the SDE's own claim (``sde_band_covers_sgd``) — its regime bound is
the derived shift limit, its statistic measures coverage, the theory's held-out SDE paths pass the
criterion (slow), planted violations (the noise-free ODE; SGD with distinct rows per step) fail."""

import numpy as np
import pytest
import xarray as xr
from scipy import stats

import simulate as sim
from figures.claims import planted_violation, registry, theory_check
from figures.joma import calibration as C
from theory import joma as J


@pytest.fixture(scope="module")
def spec():
    return registry("joma").get(C.CLAIM)


@pytest.fixture(scope="module")
def small():
    """Bands of 64 paths (the statistic's logic does not depend on the count; the claim uses 1024)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(C, "BAND_PATHS", 64)
        mp.setattr(C, "THEORY_PATHS", 8)
        C.clear_caches()
        yield
    C.clear_caches()


def test_regime_bound_is_the_derived_shift_limit(spec):
    """0.4776 in claims.toml is shift_limit(): at that shift the worst level's coverage is exactly
    0.05 below nominal (checked by the closed form, not by the root finder)."""
    bound = next(r for r in spec.regime if r.quantity == "bias_ratio").range[1]
    assert bound == pytest.approx(C.BIAS_LIMIT, abs=1e-4) and bound <= C.BIAS_LIMIT
    d = C.BIAS_LIMIT
    deficits = []
    for lv in C.LEVELS:
        q = stats.norm.ppf(0.5 + lv / 2)
        deficits.append(lv - (stats.norm.cdf(q - d) - stats.norm.cdf(-q - d)))
    assert max(deficits) == pytest.approx(0.05, abs=1e-9)


def _as_run(cfg, Y):
    """A trajectory at the config's logged times from state rows ``Y`` (n_t, n_state)."""
    names = J.state_names(cfg.Mc, cfg.K)
    return xr.Dataset({n: ("time", Y[:, i]) for i, n in enumerate(names)}, coords={"time": cfg.ode_times()})


def test_coverage_error_counts_points_inside_the_band(small):
    """A trajectory on the band's median at every judged time is always inside (error 1 - level);
    one far outside never is (error -level); NaN once it diverges."""
    cfg = C.protocol_config()
    t = cfg.ode_times()
    ens = C._band_paths(cfg)
    names = J.state_names(cfg.Mc, cfg.K)
    med = np.stack([np.interp(t, ens["time"].values, ens[n].median("path").values) for n in names], 1)
    for lv in (0.5, 0.9):
        assert C.coverage_error(_as_run(cfg, med), cfg, alpha=lv) == pytest.approx(1 - lv)
        assert C.coverage_error(_as_run(cfg, med + 10.0), cfg, alpha=lv) == pytest.approx(-lv)
    bad = med.copy()
    bad[-3:] = np.nan
    assert np.isnan(C.coverage_error(_as_run(cfg, bad), cfg, alpha=0.5))


def test_planted_violations_fail(spec, small):
    """The noise-free ODE (one deterministic trajectory: it sits in the band's middle) and minibatch
    SGD on three distinct rows per step (full batch: no noise at all) both fail the criterion."""
    cfg = spec.protocol.config(J.JomaConfig, True)
    ode = sim.solve(J.problem(cfg), backend="scipy")
    assert planted_violation(spec, ode, config=cfg, alpha=0.5).verdict == "fails"
    full = cfg.replace(batch=3, replacement=False)
    runs = C.calibration_runs(full, seeds=range(5))
    assert planted_violation(spec, [runs.isel(seed=i) for i in range(5)], config=full, alpha=0.8).verdict == "fails"


@pytest.mark.slow
def test_theory_passes_its_criterion(spec):
    """The SDE's held-out paths, judged against the band of the others, hold the criterion at every
    in-regime point of the quick map."""
    check = theory_check(spec)
    assert check.holds, str(check)


def test_null_runs_are_noise_free_full_batch_gradient_descent():
    """The SDE claim's null: every seed takes the full-batch step (all N rows, no noise), so the
    seeds coincide and equal one Euler step of the block flow per optimiser step."""
    cfg = C.protocol_config(steps=20, log_every=5)
    null = C.null_runs(cfg, seeds=[0, 3])
    names = J.state_names(cfg.Mc, cfg.K)
    for n in names:
        np.testing.assert_allclose(null[n].values[0], null[n].values[1], rtol=0, atol=1e-14)
    prob = J.problem(cfg)
    f, p = prob.system.to_numpy(), prob.system.parameter_vector(prob.params)
    y = np.asarray(prob.system.state_vector(prob.y0), float)
    for _ in range(20):
        y = y + cfg.lr * np.asarray(f(0.0, y, p), float)
    np.testing.assert_allclose([null[n].values[0, -1] for n in prob.system.state_names], y, rtol=1e-9, atol=1e-12)
