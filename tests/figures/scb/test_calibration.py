"""SCB's SDE calibration (figures/scb/calibration.py) and the SDE's own claim (the
``sde_band_coverage`` entry at the end of figures/scb/claims.toml): the registry entry loads and
resolves, the theory's own fresh SDE paths pass the claim's criterion inside the regime, planted
runs whose spread is wrong (shifted or collapsed paths) give ``fails``, and — slow — coverage at
50/80/90% and the variance ratio against 32 real SGD runs at the overlay preset."""

from pathlib import Path

import numpy as np
import pytest

import figures.scb.calibration as C
from figures.claims import planted_violation, theory_check
from figures.claims.registry import load_registry
from theory import scb

TOML = Path(C.__file__).with_name("claims.toml")
SMALL = scb.SCBConfig.preset("overlay", quick=True).replace(steps=100)


@pytest.fixture(scope="module")
def spec():
    reg = load_registry(TOML, paper="scb", config=scb.SCBConfig, resolve=True)
    return reg.get("sde_band_coverage")


def test_the_sde_claim_is_registered_with_its_derivation_and_a_map_across_the_regime(spec):
    assert spec.criterion.direction == "inside" and tuple(spec.criterion.boundary) == (0.75, 0.85)
    assert spec.map.seeds(True) >= 5 and spec.map.seeds(False) >= 12
    cfg = spec.protocol.config(scb.SCBConfig, True)
    inside = [spec.regime_point(cfg.replace(eta_A=e), {})[0] for e in spec.map.axes[0].quick]
    assert inside == [True, True, True, False]  # eta_A m2 T: 0.17, 0.35, 0.69, 1.39 at T = 8


def test_the_statistic_of_fresh_sde_paths_is_the_nominal_level():
    """Fresh paths (another seed) of the very SDE whose bands are judged are covered at the
    nominal rate within Monte-Carlo error (both observables)."""
    paths = C.sde_theory(SMALL, paths=64)
    values = np.array([C.band_coverage_statistic(p, SMALL) for p in paths])
    assert abs(values.mean() - C.CLAIM_LEVEL) < 4 * values.std(ddof=1) / np.sqrt(len(values)) + 0.02
    assert abs(np.mean([C.band_coverage_statistic(p, SMALL, level=0.5) for p in paths]) - 0.5) < 0.08


def test_a_planted_spread_violation_fails(spec):
    """Runs whose spread is wrong: the SDE's paths shifted by two band widths (bias), and all runs
    equal to the band's edge path (no spread at all, every point on the 95% quantile)."""
    paths = C.sde_theory(SMALL, paths=16)
    names = list(scb.CORRELATION_OBSERVABLES)
    shifted = [p.assign({n: p[n] + 0.5 for n in names}) for p in paths]
    assert planted_violation(spec, shifted, config=SMALL).verdict == "fails"
    ens = C.sde_ensemble(SMALL)
    edge = ens.quantile(0.95, dim="path")
    assert planted_violation(spec, [edge] * 8, config=SMALL).verdict == "fails"


@pytest.mark.slow
def test_theory_passes_its_own_criterion_inside_the_regime(spec):
    check = theory_check(spec)
    assert check.holds, str(check)


@pytest.mark.slow
def test_calibration_at_the_overlay_preset():
    """The calibration at the overlay preset: coverage within 0.8 +- 0.05 at 80% for both
    observables (intervals reported), variance ratio intervals containing 1."""
    res = C.calibration(True, device="cpu")
    js = C.calibration_json(res)
    for n in scb.CORRELATION_OBSERVABLES:
        for lvl in (0.5, 0.8, 0.9):
            c = res["coverage"][n][lvl]
            assert c.low <= c.coverage <= c.high
            assert abs(c.coverage - lvl) < 0.05
        v = res["variance"][n]
        assert v.pooled_low < 1 < v.pooled_high
        assert js[n]["variance_ratio"]["ci"] == [v.pooled_low, v.pooled_high]


# ------------------------------------------------------------------------------------------------
# SVAG
# ------------------------------------------------------------------------------------------------
def test_svag_figure_passes_the_lint_on_small_sizes(tmp_path, monkeypatch):
    """fig_svag is drawn with figures.style and passes the strict lint; its table holds one row
    per observable, statistic and l; the report's numbers carry each slope's verdict; quick mode
    draws nothing (the check costs ~1.5 CPU-minutes)."""
    from figures.core import collecting
    from figures.scb import figures as F

    orig = C.svag.__wrapped__
    monkeypatch.setattr(C, "svag", lambda quick=True: orig(quick, runs=64, paths=64, scales=(1, 2, 4), boot=50))
    with collecting(strict=True) as written:
        res = F.fig_svag(tmp_path, False, device="cpu")
    assert written.problems == {}
    assert (tmp_path / "svag_weak_error.png").exists()
    import pandas as pd

    table = pd.read_csv(tmp_path / "svag.csv")
    assert len(table) == 2 * 2 * 3 and set(table["l"]) == {1, 2, 4}
    js = C.svag_json(res)
    assert js["setting"]["runs"] == 64 and js["setting"]["sde_dt"] == C.SVAG["dt"]
    for n in scb.CORRELATION_OBSERVABLES:
        for stat in ("mean", "variance"):
            assert js[n][stat]["verdict"] in ("holds", "fails", "inconclusive")
            assert js[n][stat]["scales"] == [1.0, 2.0, 4.0]
    assert F.fig_svag(None, True, device="cpu") is None


@pytest.mark.slow
def test_svag_weak_error_shrinks_with_l_and_a_wrong_noise_model_fails():
    """SVAG l = 1, 2, 4, 8 (512 runs each) against the full SDE (1024 paths, step 1/64): the weak
    error of the mean of <a, q> falls at order >= 1 (verdict holds; its slope interval reaches -1)
    and the error at l = 8 is below a quarter of l = 1's; the same runs against an SDE with the
    wrong noise (batch 40 for 32: 0.8 of the covariance) plateau, and the variance of both
    observables fails (slope interval above -1)."""
    from empirical.scb.svag import svag_runs
    from figures.calibration import weak_order_verdict

    res = C.svag(True, boot=200)
    w = res["attention_target_overlap"]["mean"]
    assert weak_order_verdict(w) == "holds" and w.slope_low <= -1
    assert w.error_high[-1] < 0.25 * w.error[0]
    assert res["setting"]["runs"] == 512 and res["setting"]["paths"] == 1024
    cfg = C.svag_config()
    task = scb.make_task(cfg)
    sgd = {l: svag_runs(cfg, 512, l=l, seed=1 + l, task=task) for l in (1, 2, 4, 8)}
    wrong = cfg.replace(batch=40)
    model, t = scb.minibatch_sde(wrong)
    import simulate

    ens = simulate.solve_sde(model, t, paths=1024, seed=0, dt=C.SVAG["dt"], parameter_values=wrong.to_dict(),
                             backend="numba")
    planted = C.svag_weak_errors(sgd, ens, boot=200)
    for n in scb.CORRELATION_OBSERVABLES:
        assert weak_order_verdict(planted[n]["variance"]) == "fails", n
