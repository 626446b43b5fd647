"""docs/adding-a-paper.md, proven: a paper defined only in tests/tiny_paper.py, registered as one
row, runs derive / simulate / train / compare through the CLI with no other code change."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import simulate
import tiny_paper
from figures.cli import main
from figures.papers import PAPERS, Paper, register


@pytest.fixture
def tiny_row():
    row = register(Paper(name="tiny", title="1-D logistic flow", spec="tests/tiny_paper.py",
                         config=tiny_paper.TinyConfig, systems=tiny_paper.systems, problem=tiny_paper.problem,
                         train=tiny_paper.train, compare=tiny_paper.compare, figures=tiny_paper.figures,
                         sde=None, missing={"sde": "no minibatch SDE for the tiny paper",
                                                     "estimate": "one logit: nothing to size beyond the generic rules",
                                                     "text": "no real-text protocol"}))
    yield row
    PAPERS.pop("tiny")


def test_tiny_paper_through_the_cli(tiny_row, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "tiny", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["systems"][0]["state"] == ["a"]
    # the derived flow is lr (p - sigma(a)): check it numerically
    f = tiny_paper.systems()[0].to_numpy()
    assert f(0.0, np.array([0.3]), np.array([0.8, 0.5]))[0] == pytest.approx(0.5 * (0.8 - 1 / (1 + np.exp(-0.3))), rel=1e-12)

    ode_path, train_path = tmp_path / "ode.nc", tmp_path / "train.nc"
    res = runner.invoke(main, ["simulate", "tiny", "--backend", "scipy", "--out", str(ode_path)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["train", "tiny", "--device", "cpu", "--no-progress", "--out", str(train_path)])
    assert res.exit_code == 0, res.output
    ode, trained = simulate.load(ode_path), simulate.load(train_path)
    np.testing.assert_array_equal(ode["time"].values, trained["time"].values)  # one time grid: log_steps
    res = runner.invoke(main, ["compare", "tiny", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["observables"]["prob"]["passed"] is True
    assert rep["claims"][0]["name"] == "converges_to_p"

    res = runner.invoke(main, ["simulate", "tiny", "--sde"])
    assert res.exit_code == 2 and "error: sde: tiny has no sde" in res.output
    res = runner.invoke(main, ["train", "tiny", "--set", "p=1.5"])
    assert res.exit_code == 2 and "error: p: must lie in (0, 1)" in res.output
