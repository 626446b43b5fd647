"""Scan & Snap figures and CLI: the trained network follows the T = inf ODE (acceptance 2), the
closed-form figure data, and bad input -> one line + exit 2."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from figures import scan_snap as fs
from figures.cli import main
from figures.report import REPORT_KEYS


def test_compare_trained_model_follows_the_T_inf_ode():
    """Zero init, plain SGD, batch 1024, T = 4096 (count vectors), eta_Y = eta_Z = 1, 100 steps:
    z rows, Y coordinates and DT entropy within rel_l2 <= 0.05 of the full ODE; so is the entropy
    *drop* (the stringent version, since H barely moves relative to its size). The official-like
    regime (T = 128, batch 128, momentum 0.9) is where agreement with the ODE breaks; the discrete
    momentum map on the population gradient is much closer to training there, and the map's own gap
    to the ODE shrinks as lr -> 0 at momentum 0.9."""
    rep = fs.compare(quick=True, device="cpu")
    doc = rep.to_json()
    assert set(doc) == set(REPORT_KEYS)
    obs = doc["observables"]
    assert rep.agreement_passed
    for name in ("z_rows", "y_coordinates", "dt_entropy", "dt_entropy_drop", "population_loss"):
        assert obs[name]["rel_l2"] <= 0.05, name
        assert obs[name]["tolerance"] == 0.05
    assert obs["z_rows_worst_single_logit"]["tolerance"] is None  # diagnostic
    official, sweep = doc["where_agreement_breaks"]
    assert official["vs_ode_T_inf"] > 0.2  # the gap the issue reports (0.49)
    # the gap is mostly the discrete momentum map: training is >= 2x closer to it than to the ODE
    assert official["vs_momentum_map_J_inf"] < 0.5 * official["vs_ode_T_inf"]
    # and the map converges to the ODE as lr -> 0 (momentum 0.9)
    gap = sweep["momentum_map_vs_ode"]
    assert sweep["lr"] == sorted(sweep["lr"], reverse=True) and np.all(np.diff(gap) < 0) and gap[-1] < 0.1
    names = {c["name"]: c for c in doc["claims"]}
    assert {"reduced_ode_matches_training", "scan_then_snap", "entropy_falls_with_eta_Z"} <= set(names)
    for c in names.values():
        assert isinstance(c["holds"], bool) and c["evidence"]
    # the full flow itself follows training at every ratio of the reduced-system grid
    assert max(names["reduced_ode_matches_training"]["evidence"]["full_vs_training"]) <= 0.05
    json.dumps(doc)  # the CLI's --json shape


def test_closed_form_figure_data():
    df8 = fs.fig8_h(None, True, device="cpu")
    assert np.all(df8.max_gap >= 0) and np.all(df8.max_gap <= df8.bound_2eta_over_M)  # Lemma 7
    df9 = fs.fig9_B(None, True, device="cpu")
    for nu, g in df9.groupby("nu"):  # B_n(t0) depends only on (K, M, nu), not on eta_Z
        np.testing.assert_allclose(g.B_at_t0.values, g.B_at_t0.values[0], rtol=1e-9)
        assert np.all(np.diff(g.B_end.values) > 0)  # larger eta_Z -> larger late B_n
    df3 = fs.fig3_growth(None, True, device="cpu")
    assert np.all(df3.chi_lower <= df3.chi_upper + 1e-12)
    # smaller eta_Y -> larger chi at the end (Prediction (c))
    end = df3[df3.t == df3.t.max()].sort_values("eta_Y")
    assert np.all(np.diff(end.chi_upper.values) < 0)


@pytest.mark.parametrize("args,field", [
    (["derive", "scan-snap", "--set", "eta_Y=0"], "eta_Y"),
    (["derive", "scan-snap", "--set", "eta_Z=-1"], "eta_Z"),
    (["derive", "scan-snap", "--set", "num_unique_per_next=0"], "num_unique_per_next"),
    (["derive", "scan-snap", "--set", "num_last=2", "--set", "num_next_per_last=2", "--set", "M=3"], "M"),
    (["train", "scan-snap", "--set", "T=1"], "T"),
    (["train", "scan-snap", "--set", "eta_Y=nan"], "eta_Y"),
    (["simulate", "scan-snap", "--set", "zero_init=false"], "zero_init"),
    (["train", "scan-snap", "--set", "vocab=big"], "vocab"),
    (["train", "scan-snap", "--variant", "counts", "--set", "path=sequences", "--set", "steps=2"], "variant"),
    (["train", "scan-snap", "--variant", "tokens"], "variant"),
])
def test_cli_bad_input_one_line_exit_2(args, field):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.output


def test_cli_derive_json():
    res = CliRunner().invoke(main, ["derive", "scan-snap", "--format", "json", "--set", "num_unique_per_next=3",
                                    "--set", "num_common=2"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    names = [s["name"] for s in doc["systems"]]
    assert names == ["snap", "reduced", "full"]
