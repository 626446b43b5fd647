"""`tdyn ... joma`: compare passes its acceptance tolerance; bad input -> one line, exit 2."""

import json

import pytest
from click.testing import CliRunner

from figures.cli import main


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def test_compare_quick_json_within_tolerance(runner):
    res = runner.invoke(main, ["compare", "joma", "--quick", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    assert rep["paper"] == "joma" and rep["passed"] is True
    assert rep["observables"]["v"]["rel_l2"] <= 0.05
    assert rep["observables"]["z"]["rel_l2"] <= 0.05
    assert rep["details"]["invariant_relative_drift_trained"] <= 1e-3


@pytest.mark.parametrize("cmd,setting,field", [
    ("simulate", "temperature=0", "temperature"),
    ("simulate", "temperature=-2", "temperature"),
    ("simulate", "K=0", "K"),
    ("train", "rho=1.5", "rho"),
    ("train", "p_top=-0.2", "p_top"),
    ("derive", "depth=0", "depth"),
    ("simulate", "kind=cubic", "kind"),
    ("simulate", "lr=nan", "lr"),
])
def test_bad_input_one_line_exit_2(runner, cmd, setting, field):
    res = runner.invoke(main, [cmd, "joma", "--set", setting])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.stderr


def test_bad_variant(runner):
    res = runner.invoke(main, ["train", "joma", "--variant", "bogus", "--no-progress"])
    assert res.exit_code == 2
    assert res.stderr.strip().startswith("error: variant:")


def test_derive_json_lists_systems(runner):
    res = runner.invoke(main, ["derive", "joma", "--format", "json", "--set", "Mc=3", "--set", "K=2",
                               "--set", "N=2", "--set", "d=5"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    names = [s["name"] for s in doc["systems"]]
    assert names == ["block_exp_linear", "theorem2", "nonlinear_exp", "nonlinear_softmax"]
    assert "invariant_1" in doc["systems"][0]["invariants"]
