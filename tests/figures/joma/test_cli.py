"""`tdyn ... joma`: compare passes its acceptance tolerance; bad input -> one line, exit 2."""

import json

import pytest
from click.testing import CliRunner

from figures.cli import main


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def _stub_claims(*args, **kw):
    """A decided ClaimResult without the maps' runs (test_claims.py decides every claim's maps):
    the learning-order claim on planted trajectories in the right order."""
    import importlib

    import numpy as np
    import xarray as xr

    from figures.claims import MapPoint, conclude, decide, statistic_values
    from theory import joma as J

    C = importlib.import_module("figures.joma.claims")
    spec = C.decide_registry.registry().get("learning_order_lowest_lca_first")
    cfg = spec.protocol.config(J.JomaConfig, True)
    H = J.hblt_leaf_lca_heights(cfg.depth, cfg.branching, 0)[1:]
    t = cfg.ode_times()
    runs = [xr.Dataset({f"z_{l + 1}": ("time", (1 + 0.1 * s) * (1 - np.exp(-t / (100.0 * h)))) for l, h in enumerate(H)},
                       coords={"time": t}) for s in range(5)]
    vals = statistic_values(spec, runs, cfg, horizon=1500)
    point = MapPoint({"rho": cfg.rho, "horizon": 1500}, True, (), tuple(vals), decide(vals, spec.criterion))
    return [conclude(spec, [point])]


def test_compare_quick_json_report_and_claims(runner, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("figures.joma.compare"), "decided_claims", _stub_claims)
    res = runner.invoke(main, ["compare", "joma", "--quick", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    assert rep["paper"] == "joma" and rep["agreement_passed"] is True
    obs = rep["observables"]
    for k in ("v", "z"):  # headline: the CE/tanh/softmax network inside the Assumption-1 window
        o = obs[f"mixture_{k}_assumption1_window"]
        assert o["tolerance"] is not None and o["rel_l2"] <= o["tolerance"]
    # the derivation check (the ODE's own objective): only the SGD step error remains
    assert obs["derivation_check_v"]["rel_l2"] < 1e-3 and obs["derivation_check_z"]["rel_l2"] < 5e-3
    assert obs["derivation_check_invariant_drift"]["rel_l2"] < 1e-3
    # the same mixture network with the ODE's own objective: the CE gap is Assumption 1, not a bug
    for k in ("v", "z"):
        assert obs[f"mixture_fixed_top_{k}"]["rel_l2"] < 0.1 * obs[f"mixture_{k}_full_run"]["rel_l2"]
    claims = {c["name"]: c for c in rep["claims"]}  # the ClaimResults of figures.joma.claims (stubbed here)
    assert claims["learning_order_lowest_lca_first"]["verdict"] == "holds"
    assert claims["learning_order_lowest_lca_first"]["criterion"]["derivation"]
    assert {row["setting"]["observable"] for row in rep["where_agreement_breaks"]} == {"v", "z"}
    from figures.report import BREAK_KEYS

    assert all(tuple(row) == BREAK_KEYS for row in rep["where_agreement_breaks"])


@pytest.mark.slow
def test_compare_claims_are_the_registrys(runner):
    """`tdyn compare joma`'s claims: the registry's claims decided over seeds with their maps
    (~90 CPU s) and the real-text claims where a corpus is present."""
    res = runner.invoke(main, ["compare", "joma", "--quick", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    claims = {c["name"]: c for c in rep["claims"]}  # the registry's ClaimResults (figures.joma.claims)
    registry = {"invariant_holds", "invariant_holds_mixture", "entropy_drops_then_bounces",
                "learning_order_lowest_lca_first"}
    wikitext = {"wikitext_entropy_drop_and_bounce", "wikitext_stable_rank_drop_and_bounce", "wikitext_bounce_at_best_lr"}
    assert set(claims) == registry | wikitext  # without a corpus the real-text claims are untested, not dropped
    for c in claims.values():
        assert c["verdict"] in ("holds", "fails", "inconclusive", "untested") and c["grade"] in "ABC"
        assert c["criterion"]["derivation"] and c["falsifier"]
        assert c["map"]["points"] or c["verdict"] == "untested"
    for name in registry:  # decided over >= 5 seeds inside the regime
        assert claims[name]["seeds"] >= 5 and claims[name]["regime_points"] >= 1, claims[name]


def test_train_hier_uses_the_learning_rate_and_ignored_settings_exit_2(runner, tmp_path):
    import xarray as xr

    out = tmp_path / "hier.nc"
    res = runner.invoke(main, ["train", "joma", "--variant", "hier", "--set", "lr=0.5", "--set", "steps=2",
                               "--set", "log_every=1", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    with xr.open_dataset(out) as ds:
        assert json.loads(ds.attrs["config"])["lr"] == 0.5
    for variant, setting in (("probe", "Mc=4"), ("fixed", "batch=4"), ("hier", "attention=softmax")):
        res = runner.invoke(main, ["train", "joma", "--variant", variant, "--set", setting, "--no-progress"])
        assert res.exit_code == 2, (variant, res.output)
        assert res.stderr.strip().startswith(f"error: {setting.split('=')[0]}:"), res.stderr


@pytest.mark.parametrize("cmd,setting,field", [
    ("simulate", "temperature=0", "temperature"),
    ("simulate", "temperature=-2", "temperature"),
    ("simulate", "K=0", "K"),
    ("train", "rho=1.5", "rho"),
    ("train", "p_top=-0.2", "p_top"),
    ("derive", "depth=0", "depth"),
    ("simulate", "attention=cubic", "attention"),
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
