"""docs/adding-a-paper.md, proven: the tiny paper (tests/tiny/: its three packages theory/,
empirical/, figures/ with the standard module names) registered as one row runs derive / simulate /
train / compare / figures through the CLI, touching no core file; and the doc names what the code
has (slots, module names)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import simulate
from figures.cli import main
from figures.papers import PAPERS, SLOTS, Paper, get, register

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-a-paper.md"
TINY = Path(__file__).resolve().parent / "tiny"

from tiny import ROW  # noqa: E402  (the row, exactly as docs/adding-a-paper.md shows it)


@pytest.fixture
def tiny_row():
    row = register(Paper(**ROW))
    yield row
    PAPERS.pop("tiny")


def test_tiny_paper_through_the_cli(tiny_row, tmp_path):
    from tiny.theory import systems

    assert tiny_row.variants == ("sgd", "exact")  # from the Config's VARIANTS
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "tiny", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["systems"][0]["state"] == ["a"]
    # the derived flow is lr (p - sigma(a)): check it numerically
    f = systems()[0].to_numpy()
    want = 0.5 * (0.8 - 1 / (1 + np.exp(-0.3)))
    assert f(0.0, np.array([0.3]), np.array([0.8, 0.5]))[0] == pytest.approx(want, rel=1e-12)

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

    res = runner.invoke(main, ["figures", "tiny", "--outdir", str(tmp_path / "figs"), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["claims", "logit.pdf", "logit.png", "report.json"]

    sde_path = tmp_path / "sde.nc"  # the generic SDE of the derived noise, on the same time grid
    res = runner.invoke(main, ["simulate", "tiny", "--sde", "--paths", "16", "--out", str(sde_path)])
    assert res.exit_code == 0, res.output
    ens = simulate.load(sde_path)
    assert dict(ens["a"].sizes) == {"path": 16, "time": trained.sizes["time"]}
    np.testing.assert_array_equal(ens["time"].values, trained["time"].values)
    res = runner.invoke(main, ["train", "tiny", "--set", "p=1.5"])
    assert res.exit_code == 2 and "error: p: must lie in (0, 1)" in res.output


def test_variant_is_bound_before_the_overrides(tiny_row, tmp_path):
    runner = CliRunner()
    out = tmp_path / "exact.nc"
    res = runner.invoke(main, ["train", "tiny", "--variant", "exact", "--set", "steps=20", "--no-progress",
                               "--device", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ds = simulate.load(out)
    assert json.loads(ds.attrs["config"])["variant"] == "exact" and ds.sizes["time"] == 3
    # exact gradient descent: a_{k+1} = a_k + lr (p - sigma(a_k)), no labels drawn
    a = 0.0
    for _ in range(20):
        a += 0.5 * (0.8 - 1 / (1 + np.exp(-a)))
    assert float(ds["a"].values[-1]) == pytest.approx(a, rel=1e-12)
    # a setting the variant ignores: one line, exit 2
    res = runner.invoke(main, ["train", "tiny", "--variant", "exact", "--set", "batch=8", "--no-progress"])
    assert res.exit_code == 2 and res.stderr.startswith("error: batch: is ignored by variant 'exact'"), res.stderr
    res = runner.invoke(main, ["train", "tiny", "--variant", "adam", "--no-progress"])
    assert res.exit_code == 2 and res.stderr.startswith("error: variant: tiny: must be one of ('sgd', 'exact')")


def test_update_rule_is_the_same_in_numpy_and_torch():
    from tiny.empirical import update

    g, w = np.array([0.3, -1.2]), np.array([1.0, 2.0])
    new_np, _ = update.update(g, update.init(w), w, lr=0.1)
    new_t, _ = update.update(torch.tensor(g), update.init(torch.tensor(w), xp=torch), torch.tensor(w), lr=0.1, xp=torch)
    np.testing.assert_allclose(new_np, w - 0.1 * g, rtol=1e-15)
    np.testing.assert_array_equal(new_t.numpy(), new_np)


def test_derivation_equals_the_population_gradient():
    from tiny.theory import systems
    from tiny.theory.population import population_gradient

    f = systems()[0].to_numpy()
    for a in (-2.0, 0.0, 0.7):
        want = -0.2 * population_gradient(a, 0.3)
        assert f(0.0, np.array([a]), np.array([0.3, 0.2]))[0] == pytest.approx(want, rel=1e-13)


def test_the_doc_matches_the_code():
    doc = DOC.read_text()
    row = re.search(r"PAPER = Paper\((.*?)\n\)", doc, re.S).group(1)
    for slot in SLOTS:  # every slot of the table, in the row the doc shows
        assert re.search(rf"\b{slot}=", row), slot
    for layer, modules in (("theory", ("config", "derive", "population", "problem", "sde")),
                           ("empirical", ("data", "model", "update", "experiment")),
                           ("figures", ("compare", "claims", "figures"))):
        assert sorted(p.stem for p in (TINY / layer).glob("*.py") if p.stem != "__init__") == sorted(modules)
        for m in modules:
            assert f"{m}.py" in doc, (layer, m)
    assert "FIGURES" in doc and "make_figures" in doc and "Config.preset" in doc and "VARIANTS" in doc
    assert "time_of_step" not in doc  # the Trainer reads time from the config
    # the doc's example row and this test's row name the same functions
    for slot in ("train", "figures", "estimate"):
        assert ROW[slot].split(":")[1] in row


def test_a_row_with_the_tiny_papers_slots_passes_the_contract(tiny_row):
    cfg = get("tiny").make_config(["steps=10", "log_every=3"])
    np.testing.assert_array_equal(get("tiny").slot("problem")(cfg).t, cfg.ode_times())
    traj = get("tiny").slot("train")(cfg, device="cpu")
    np.testing.assert_array_equal(traj["time"].values, cfg.ode_times())
