"""figures/scan_snap/compare.py (and the claims it reports): the trained network follows the T = inf
ODE (acceptance 2), where agreement breaks, the claims table (ClaimResults) and the reduced grid."""

import json

import numpy as np

from figures.report import BREAK_KEYS, REPORT_KEYS
from figures.scan_snap import compare as fc


def test_compare_trained_model_follows_the_T_inf_ode(monkeypatch):
    """Zero init, plain SGD, batch 1024, T = 4096 (count vectors), eta_Y = eta_Z = 1, 100 steps:
    z rows, Y coordinates and DT entropy within rel_l2 <= 0.05 of the full ODE; so is the entropy
    *drop* (the stringent version, since H barely moves relative to its size). The official-like
    regime (T = 128, batch 128, momentum 0.9) is where agreement with the ODE breaks; the discrete
    momentum map on the population gradient is much closer to training there, and the map's own gap
    to the ODE shrinks as lr -> 0 at momentum 0.9."""
    import figures.scan_snap.text as text

    # the real-text claims (5-seed WikiText runs) are tests/figures/scan_snap/test_text.py's
    monkeypatch.setattr(text, "text_claim_results", lambda ctx: [])
    rep = fc.compare(quick=True, device="cpu")
    doc = rep.to_json()
    assert set(doc) == set(REPORT_KEYS)
    obs = doc["observables"]
    assert rep.agreement_passed
    for name in ("z_rows", "y_coordinates", "dt_entropy", "dt_entropy_drop", "population_loss"):
        assert obs[name]["rel_l2"] <= 0.05, name
        assert obs[name]["tolerance"] == 0.05
    assert obs["z_rows_worst_single_logit"]["tolerance"] is None  # diagnostic
    official, *sweep = doc["where_agreement_breaks"]
    assert all(set(row) == set(BREAK_KEYS) for row in [official, *sweep])
    official = official["rel_l2"]
    assert official["vs_ode_T_inf"] > 0.2  # the gap the issue reports (0.49)
    # the gap is mostly the discrete momentum map: training is >= 2x closer to it than to the ODE
    assert official["vs_momentum_map_J_inf"] < 0.5 * official["vs_ode_T_inf"]
    # and the map converges to the ODE as lr -> 0 (momentum 0.9)
    lrs, gap = [r["setting"]["lr"] for r in sweep], [r["rel_l2"]["momentum_map_vs_ode"] for r in sweep]
    assert lrs == sorted(lrs, reverse=True) and np.all(np.diff(gap) < 0) and gap[-1] < 0.1
    # the claims table is the registry's ClaimResults (decided over seeds, tests/figures/scan_snap/test_claims.py),
    # then the real-text ones (stubbed here)
    names = {c["name"]: c for c in doc["claims"]}
    registry = ["reduced_ode_matches_training", "entropy_falls_with_eta_z", "sde_finite_t_shift", "scan_then_snap"]
    assert list(names) == registry
    assert "real_text_claims" not in doc["details"]
    for name, c in names.items():
        assert {"verdict", "interval", "seeds", "regime", "falsifier", "null", "demo", "practice"} <= set(c)
        assert c["seeds"] >= 5 and c["practice"] == "reduced model" and c["null"]["values"]
    # the reduced claim's map beside the exact T = inf flow: training follows the flow, so where the
    # reduction misses, the exact flow misses by as much (the gap is the reduction's, not SGD's)
    grid = doc["details"]["reduced_grid"]
    assert len(grid) == len(names["reduced_ode_matches_training"]["map"]["points"])
    for row in grid:
        assert abs(row["training_error_over_theorem1"] - row["exact_flow_error_over_theorem1"]) <= \
            0.1 * row["exact_flow_error_over_theorem1"] + 0.1, row
    # the snap claim's map (no in-regime point can be run: untested) beside the exact T = inf flow and
    # Theorem 4's closed form with the fitted C_0: at the paper's Fig. 4 settings training follows the
    # exact flow's fall ratio
    snap = doc["details"]["snap_grid"]
    assert names["scan_then_snap"]["verdict"] == "untested"
    assert len(snap) == len(names["scan_then_snap"]["map"]["points"])
    assert not any(r["inside_regime"] for r in snap)
    for row in (r for r in snap if r["demo"]):
        assert abs(row["training_fall_ratio"] - row["exact_flow_fall_ratio"]) <= 0.05 * row["exact_flow_fall_ratio"], row
        assert row["theorem_4_fall_ratio"] < 1, row
    json.dumps(doc)  # the CLI's --json shape


def test_compare_details_carry_the_sde_calibration():
    """The report's details hold the SDE's calibration against count-vector SGD at T = 32, 128, 1024
    (coverage per level with its interval, pooled variance ratio); at T = 32 the runs' mean final DT
    entropy is nearer the SDE's mean than the unshifted T = inf value (the finite-T shift)."""
    rows = fc.compare(quick=True, device="cpu").to_json()["details"]["sde_calibration"]
    json.dumps(rows)
    assert sorted({r["T"] for r in rows}) == [32, 128, 1024] and len(rows) == 12
    for r in rows:
        assert set(r["coverage"]) == {"0.5", "0.8", "0.9"}
        lo, hi = r["variance_ratio"][1:]
        assert lo <= r["variance_ratio"][0] <= hi
    ent = next(r for r in rows if r["T"] == 32 and r["observable"] == "dt_entropy")["final_mean"]
    assert abs(ent["sgd"] - ent["sde"]) < 0.25 * abs(ent["sgd"] - ent["t_inf"])
