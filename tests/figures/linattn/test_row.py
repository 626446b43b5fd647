"""linattn's row (figures/linattn/paper.py, registered through the entry point): derive,
simulate and train through the CLI on one time axis (the config's), bad settings named, and (slow) the quick
compare and figures."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import simulate
from figures.cli import main
from figures.papers import get


@pytest.fixture
def row():
    return get("linattn")  # registered through the tdyn.papers entry point


def test_derive_simulate_train_through_the_cli(row, tmp_path):
    assert row.variants == ("merged", "separate")
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "linattn", "--format", "json"])
    assert res.exit_code == 0, res.output
    names = [s["name"] for s in json.loads(res.output)["systems"]]
    assert names == ["merged", "separate", "component", "isotropic"]
    for variant in row.variants:
        ode_path, train_path = tmp_path / f"{variant}-ode.nc", tmp_path / f"{variant}-train.nc"
        tiny = ["--set", "steps=10", "--set", "log_every=3", "--set", "batch=8"]
        res = runner.invoke(main, ["simulate", "linattn", "--set", f"variant={variant}", "--backend", "scipy",
                                   *tiny, "--out", str(ode_path)])
        assert res.exit_code == 0, res.output
        res = runner.invoke(main, ["train", "linattn", "--variant", variant, "--device", "cpu", "--no-progress",
                                   *tiny, "--out", str(train_path)])
        assert res.exit_code == 0, res.output
        ode, trained = simulate.load(ode_path), simulate.load(train_path)
        cfg = row.make_config(["steps=10", "log_every=3"], variant=variant)
        np.testing.assert_array_equal(ode["time"].values, cfg.ode_times())
        np.testing.assert_array_equal(trained["time"].values, cfg.ode_times())
        # the same aligned start: the first logged point agrees exactly with the ODE's initial state
        for name in ("loss", "gamma_1", "gamma_3"):
            assert trained[name].values[0] == pytest.approx(ode[name].values[0], rel=1e-12)
    res = runner.invoke(main, ["train", "linattn", "--set", "lams=(1.0, 2.0, 0.5)"])
    assert res.exit_code == 2 and "error: lams: must be in decreasing order" in res.output


@pytest.mark.slow
def test_quick_compare_and_figures(row, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["figures", "linattn", "--outdir", str(tmp_path), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert {"merged.png", "separate.png", "report.json"} <= {p.name for p in tmp_path.iterdir()}
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["agreement_passed"] is True
