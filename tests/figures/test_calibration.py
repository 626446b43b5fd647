"""figures/calibration.py on ensembles whose answers are known in closed form: coverage of a wider
law by a band, variance ratios and the honesty of their intervals, the (lr, batch) map, and the
weak-error slope."""

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from figures.calibration import calibration_map, coverage, variance_ratio, weak_error
from theory import ConfigError


def _walks(n, T, sd, rng, dim):
    """Random walks from 0 with N(0, sd^2) steps: (n, T) on times 0..T-1."""
    Y = np.concatenate([np.zeros((n, 1)), np.cumsum(sd * rng.standard_normal((n, T - 1)), axis=1)], axis=1)
    return xr.Dataset({"x": ((dim, "time"), Y)}, coords={"time": np.arange(T, dtype=float)})


def test_coverage_matches_closed_forms_and_its_interval_covers():
    """Runs from the SDE's own law are covered at the nominal level; runs with twice the spread
    are covered at P(|Z| < z_level / 2) (Gaussian walks: the band scales with the step sd). Over
    repeated experiments the mean coverage is on the closed form and the 90% run-bootstrap
    interval holds the truth about 90% of the time."""
    rng = np.random.default_rng(0)
    levels, reps = (0.5, 0.8, 0.9), 80
    want_wide = {lv: 2 * stats.norm.cdf(stats.norm.ppf((1 + lv) / 2) / 2) - 1 for lv in levels}
    got = {k: {lv: [] for lv in levels} for k in ("same", "wide")}
    hits = {k: {lv: 0 for lv in levels} for k in ("same", "wide")}
    for _ in range(reps):
        sde = _walks(2000, 11, 1.0, rng, "path")
        for kind, sd in (("same", 1.0), ("wide", 2.0)):
            cov = coverage(sde, _walks(100, 11, sd, rng, "run"), "x")
            for lv in levels:
                c = cov[lv]
                assert c.n_points == 100 * 10  # t = 0 excluded
                truth = lv if kind == "same" else want_wide[lv]
                got[kind][lv].append(c.coverage)
                hits[kind][lv] += c.low <= truth <= c.high
    for kind in got:
        for lv in levels:
            truth = lv if kind == "same" else want_wide[lv]
            v = np.array(got[kind][lv])
            assert abs(v.mean() - truth) < 3.5 * v.std() / np.sqrt(reps)
            assert hits[kind][lv] / reps > 0.9 - 4 * np.sqrt(0.09 / reps)
    # the binomial interval treats correlated points as independent: narrower than the run bootstrap
    sde, wide = _walks(2000, 11, 1.0, rng, "path"), _walks(100, 11, 2.0, rng, "run")
    b, r = coverage(sde, wide, "x", interval="binomial")[0.8], coverage(sde, wide, "x")[0.8]
    assert b.high - b.low < r.high - r.low
    with pytest.raises(ConfigError, match="interval"):
        coverage(sde, wide, "x", interval="normal")


def test_variance_ratio_intervals_cover_the_truth_at_their_level():
    rng = np.random.default_rng(1)
    hits_f, hits_pooled, reps = 0, 0, 200
    for _ in range(reps):
        sde = xr.Dataset({"x": (("path", "time"), 1.5 * rng.standard_normal((300, 4)))}, coords={"time": np.arange(4.0)})
        runs = xr.Dataset({"x": (("run", "time"), rng.standard_normal((20, 4)))}, coords={"time": np.arange(4.0)})
        vr = variance_ratio(sde, runs, "x", t_min=0.0)
        hits_f += (vr.low[0] <= 2.25 <= vr.high[0])
        hits_pooled += (vr.pooled_low <= 2.25 <= vr.pooled_high)
    # 90% intervals: hit rates within 3 binomial SDs of 0.9
    sd = np.sqrt(0.9 * 0.1 / reps)
    assert abs(hits_f / reps - 0.9) < 3 * sd
    assert abs(hits_pooled / reps - 0.9) < 3 * sd


def test_calibration_map_finds_where_it_breaks():
    rng = np.random.default_rng(2)

    def cell(lr, batch, runs=400):  # real runs get extra spread lr/batch that the "SDE" lacks
        return _walks(2000, 11, 1.0, rng, "path"), _walks(runs, 11, 1.0 + 4 * lr / batch, rng, "run")

    rows = calibration_map(cell, [0.001, 1.0], [1, 64], "x")
    verdict = {(r.lr, r.batch): r.verdict for r in rows}
    assert verdict[(1.0, 1)] == "breaks"
    assert verdict[(0.001, 64)] == "holds"
    assert rows[-1].variance.pooled_high < 1  # lr/batch = 1/1: SGD spreads 25x more than the SDE
    # five runs cannot decide a matched cell
    few = calibration_map(lambda lr, b: cell(lr, b, runs=5), [0.001], [64], "x")
    assert few[0].verdict == "inconclusive"
    br = next(r for r in rows if (r.lr, r.batch) == (0.001, 64)).to_break()
    assert br.factor == "(lr, batch)" and br.within_tolerance is True and "coverage_0.5" in br.setting
    assert [r.to_break().within_tolerance for r in rows if r.verdict == "breaks"] == [False] * sum(
        r.verdict == "breaks" for r in rows)


def test_weak_error_slope_on_known_bias():
    """SVAG samples biased by c/l (theory: weak order 1) give slope -1; a bias that does not shrink
    gives slope 0 and an interval that excludes -1."""
    rng = np.random.default_rng(3)
    n = 20000
    sde = rng.standard_normal((n, 3))
    shrinking = {l: rng.standard_normal((n, 3)) + 0.4 / l for l in (1, 2, 4, 8)}
    we = weak_error(shrinking, sde, boot=200)
    assert we.slope_low <= -1 <= we.slope_high and abs(we.slope + 1) < 0.15
    np.testing.assert_allclose(we.error, [0.4, 0.2, 0.1, 0.05], rtol=0.25)
    flat = {l: rng.standard_normal((n, 3)) + 0.2 for l in (1, 2, 4, 8)}
    we = weak_error(flat, sde, boot=200)
    assert abs(we.slope) < 0.2 and we.slope_low > -0.5
    w1 = weak_error(shrinking, sde, metric="wasserstein", boot=50)
    assert w1.error[0] == pytest.approx(0.4, rel=0.1)  # W1 of a shift is the shift
    with pytest.raises(ConfigError, match="metric"):
        weak_error(shrinking, sde, metric="kl")


def test_coverage_on_a_finer_sde_grid_with_other_variables():
    """An SDE ensemble on a finer time grid than the runs, holding other variables too (as
    simulate.solve_sde returns it): its paths are interpolated onto the runs' times — the coverage
    is that of the ensemble subsampled at those times."""
    rng = np.random.default_rng(5)
    fine = _walks(400, 41, 0.5, rng, "path")
    fine = fine.assign(y=(("path", "time"), 2 * fine["x"].values)).assign_coords(time=np.linspace(0, 10, 41))
    runs = _walks(50, 11, 1.0, rng, "run").assign_coords(time=np.linspace(0, 10, 11))
    got = coverage(fine, runs, "x")
    same = coverage(fine.isel(time=slice(None, None, 4))[["x"]], runs, "x")
    assert all(got[lv].coverage == same[lv].coverage for lv in got)
