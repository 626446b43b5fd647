"""Scan & Snap figures and CLI: the trained network follows the T = inf ODE (acceptance 2), the
closed-form figure data, and bad input -> one line + exit 2."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from figures import scan_snap as fs
from figures.cli import main
from theory import scan_snap as ss


def test_compare_trained_model_follows_the_T_inf_ode():
    """Zero init, plain SGD, batch 1024, T = 4096 (count vectors), eta_Y = eta_Z = 1, 100 steps:
    z rows and DT entropy within rel_l2 <= 0.05 of the full ODE; so is the entropy *drop* (the
    stringent version, since H barely moves relative to its size). The official-like regime
    (T = 128, batch 128, momentum 0.9) is reported as where agreement breaks."""
    rep = fs.compare(quick=True, device="cpu")
    obs = rep["observables"]
    assert rep["passed"]
    assert obs["z_rows"]["rel_l2"] <= 0.05
    assert obs["dt_entropy"]["rel_l2"] <= 0.05
    assert obs["dt_entropy_drop"]["rel_l2"] <= 0.05
    assert obs["population_loss"]["rel_l2"] <= 0.05
    assert rep["where_agreement_breaks"]["observables"]["z_rows"]["rel_l2"] > 0.05
    json.dumps(rep)  # the CLI's --json shape


def test_closed_form_figure_data():
    _, df8 = fs.fig8_h()
    assert np.all(df8.max_gap >= 0) and np.all(df8.max_gap <= df8.bound_2eta_over_M)  # Lemma 7
    _, df9 = fs.fig9_B()
    for nu, g in df9.groupby("nu"):  # B_n(t0) depends only on (K, M, nu), not on eta_Z
        np.testing.assert_allclose(g.B_at_t0.values, g.B_at_t0.values[0], rtol=1e-9)
        assert np.all(np.diff(g.B_end.values) > 0)  # larger eta_Z -> larger late B_n
    _, df3 = fs.fig3_growth()
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
