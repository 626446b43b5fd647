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
