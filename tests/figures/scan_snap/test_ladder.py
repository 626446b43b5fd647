"""figures/scan_snap/ladder.py: the ODE read through the rungs' read-out equals the ODE's own
observables; the summary's numbers on constructed ladders; (slow) the quick ladder against the ODE
and its figure's lint."""

import numpy as np
import pytest
import xarray as xr

from figures.core import collecting
from figures.scan_snap.compare import COMPARE_TOL
from figures.scan_snap.lines import theory_trajectory
from figures.scan_snap.ladder import HEADLINE, ladder_config, ladder_data, ladder_figure, ladder_summary, ode_observables


@pytest.fixture(scope="module")
def ode():
    cfg = ladder_config(True).replace(steps=40)
    return cfg, ode_observables(cfg, cfg.ode_times())


def test_ode_through_the_readout_equals_the_flows_own_entropy(ode):
    cfg, ds = ode
    own = theory_trajectory(cfg.replace(zero_init=True), cfg.ode_times())  # observables_from_parameters inside
    np.testing.assert_allclose(ds["dt_entropy"].values, own["dt_entropy"].values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ds["support_entropy"].values, own["support_entropy"].values, rtol=0, atol=1e-12)
    assert ds["ct_mass"].values[0] == pytest.approx(10 / 15.5, rel=1e-12)  # zero init: P's common mass


def _ladder(ode_ds, curves):
    """A ladder dataset whose rung r, seed s is ``curves[r][s]`` (time series on the ODE's times)."""
    rungs = []
    for r, per_seed in enumerate(curves):
        h = np.stack(per_seed)
        rungs.append(xr.Dataset({HEADLINE: (("seed", "time"), h), "ct_mass": (("seed", "time"), h - 2.0)},
                                coords={"seed": list(range(len(per_seed))), "time": ode_ds["time"].values}))
    ds = xr.concat(rungs, "rung", join="outer").assign_coords(rung=list(range(len(curves))))
    ds["cpu_seconds"] = ("rung", np.arange(len(curves), dtype=float))
    return ds


def test_summary_on_constructed_ladders(ode):
    _, th = ode
    h = th[HEADLINE].values
    rising = h[0] + (h[0] - h)  # the entropy rises as much as the ODE's falls
    ds = _ladder(th, [[h, h], [h, rising, rising]])
    rows = ladder_summary(ds, th)
    assert rows[0]["rel_l2_dt_entropy"] == 0 and rows[0]["rel_l2_dt_entropy_drop"] == 0
    assert rows[0]["headline_holds_seeds"] == 2 and rows[0]["seeds"] == 2
    assert rows[1]["seeds"] == 3 and rows[1]["headline_holds_seeds"] == 1
    # seed mean (h + 2 rising)/3: its drop is -(h(0) - h)/3, i.e. off by 4/3 of the ODE's drop
    assert rows[1]["rel_l2_dt_entropy_drop"] == pytest.approx(4 / 3, rel=1e-12)
    late = rows[0]["late_fraction_of_fall_per_seed"][0]
    mid = h[(len(h) - 1) // 2]
    assert late == pytest.approx((mid - h[-1]) / (h[0] - h[-1]), rel=1e-12)


@pytest.mark.slow
def test_quick_ladder_against_the_ode_and_its_figure(tmp_path):
    """Rungs 0 and 1 follow the ODE's DT entropy within the compare report's tolerance (the level:
    it moves by a few percent of ln 10); rung 2 is reported, not judged (AdamW has no flow time).
    Their *drop* h(0) - h(t) is off by 27-32% at T = 128 (finite T: the runs fall further than the
    T = inf flow; see the summary) - not asserted here."""
    ds, th, rows = ladder_data(True, seeds=range(2), rung2_seeds=range(1))
    by = {r["rung"]: r for r in rows}
    for r in (0, 1):
        assert by[r]["rel_l2_dt_entropy"] <= COMPARE_TOL
        assert by[r]["headline_holds_seeds"] == 2
    with collecting(strict=True):
        path = ladder_figure(ds, th, tmp_path)
    assert path.exists()
