"""figures.topic.calibration: the SDE's own claim (``sde_calibration`` in claims.toml) — its
theory (an independent SDE ensemble) holds inside the regime; planted runs whose residual leaves
the SDE's band (a spread or a level the SDE does not predict) give ``fails``; the regime quantity
is the step's contraction ``lr 2 lambda_max`` (below 2 inside, above it SGD diverges); the
calibration numbers have the layout the compare report and the figures read."""

from __future__ import annotations

import numpy as np
import pytest

from figures.claims import planted_violation, registry, theory_check
from figures.topic import calibration as cal
from theory import topic as th


@pytest.fixture(scope="module")
def claim():
    return registry("topic").get(cal.CLAIM)


def test_the_sde_claim_is_in_the_registry_with_its_functions(claim):
    assert claim.criterion.direction == "inside" and tuple(claim.criterion.boundary) == (-0.05, 0.05)
    assert [a.name for a in claim.map.axes] == ["lr", "batch", "band"] and claim.map.seeds(True) >= 5


def test_lr_curvature_is_the_step_contraction():
    cfg = th.TopicConfig.preset("stage1", True)
    k = cal.lr_curvature(cfg)
    assert 0 < k < 2  # the preset is inside the regime
    assert cal.lr_curvature(cfg.replace(lr=2 * cfg.lr)) == pytest.approx(2 * k)
    assert cal.lr_curvature(cfg.replace(lr=1.2)) > 2  # the map's last lr is outside it


def test_theory_check_holds_inside_the_regime(claim):
    check = theory_check(claim, quick=True)
    assert check.holds, str(check)


@pytest.mark.parametrize("plant", ["shifted", "too_wide"])
def test_planted_violation_fails(claim, plant):
    """SDE paths moved off the band (a level the SDE does not predict) or spread 3x as wide as it
    predicts stand in for SGD runs: their band fraction misses the level by far more than 0.05."""
    cfg = claim.protocol.config(th.TopicConfig, True)
    ens = cal.sde_ensemble(cfg, 128, 1)
    x = ens[cal.OBSERVABLE]
    mean = x.mean("path")
    planted = x + 0.5 * mean if plant == "shifted" else mean + 3.0 * (x - mean)
    runs = [ens.isel(path=i).assign({cal.OBSERVABLE: planted.isel(path=i)}) for i in range(8)]
    dec = planted_violation(claim, runs, config=cfg, quick=True, band=0.8)
    assert dec.verdict == "fails", dec


def test_band_fraction_is_nan_for_a_diverged_run():
    cfg = th.TopicConfig.preset("stage1", True)
    ens = cal.sde_ensemble(cfg, 128, 1)
    run = ens.isel(path=0).copy(deep=True)
    run[cal.OBSERVABLE][-3:] = np.nan
    assert np.isnan(cal.band_fraction(run, cfg, band=0.8))
    assert abs(cal.band_fraction(ens.isel(path=1), cfg, band=0.8)) <= 0.2 + 1e-12


def test_batched_runs_are_the_per_seed_runs():
    """``sgd_runs`` (all seeds in one vectorised run) gives each seed's per-seed SGD run
    (``sgd_run``: ``empirical.topic.train``) to rounding, in the order of ``seeds``; at a step
    size beyond the stability limit every seed is NaN from its divergence on, as the per-seed
    run's partial trajectory."""
    cfg = th.TopicConfig.preset("stage1", True).replace(steps=60, log_every=20)
    runs = cal.sgd_runs(cfg, seeds=[2, 0])
    for run, seed in zip(runs, (2, 0)):
        ref = cal.sgd_run(cfg, seed)
        assert set(ref.data_vars) <= set(run.data_vars)
        np.testing.assert_array_equal(run["time"].values, ref["time"].values)
        for name in ref.data_vars:
            np.testing.assert_allclose(run[name].values, ref[name].values, rtol=1e-12, atol=1e-14, err_msg=name)
    assert not np.allclose(runs[0][cal.OBSERVABLE].values[1:], runs[1][cal.OBSERVABLE].values[1:])
    wild = cfg.replace(lr=40.0, steps=200)
    for run, seed in zip(cal.sgd_runs(wild, seeds=[0, 1]), (0, 1)):
        ref = cal.sgd_run(wild, seed)[cal.OBSERVABLE].values
        assert np.isnan(ref[-1])
        np.testing.assert_array_equal(np.isnan(run[cal.OBSERVABLE].values), np.isnan(ref))
