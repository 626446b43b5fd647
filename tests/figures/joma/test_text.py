"""figures/joma/text.py (and empirical/joma/text.py's per-layer summary): the real-text claims'
statistic on known curves, and their decision from per-seed runs (no corpus needed: the protocol's
results are planted)."""

import numpy as np
import pytest
import xarray as xr

from empirical.joma import text as JT

STEPS = np.arange(0, 60, 10.0)
BOUNCE = np.array([2.6, 2.0, 1.5, 1.6, 1.7, 1.8])  # drops 1.1 by step 20, then rises 0.3
MONOTONE = np.array([2.6, 2.4, 2.2, 2.1, 2.05, 2.0])  # never turns


def _traj(entropy_layers, stable_rank_layers=None, val_loss=1.0):
    data = {f"entropy_layer{l}": ("time", y) for l, y in enumerate(entropy_layers)}
    data.update({f"stable_rank_layer{l}": ("time", y) for l, y in enumerate(stable_rank_layers or entropy_layers)})
    data["val_loss"] = ("time", np.full(STEPS.size, val_loss))
    data["step"] = ("time", STEPS)
    return xr.Dataset(data, coords={"time": STEPS})


def test_per_layer_summary_and_curve_rebound():
    from figures.joma.text import curve_rebound

    traj = _traj([BOUNCE, MONOTONE])
    s = JT.per_layer_summary(traj)
    assert s["min_step"].tolist() == [20, 50]
    assert s["drop"].tolist() == pytest.approx([1.1, 0.6]) and s["bounce"].tolist() == pytest.approx([0.3, 0.0])
    # y(T) - min over the first half (steps <= 25): 1.8 - 1.5 and 2.0 - 2.2
    assert curve_rebound(traj, name="entropy_layer0") == pytest.approx(0.3)
    assert curve_rebound(traj, name="entropy_layer1") == pytest.approx(-0.2)
    assert curve_rebound(traj, name="entropy_layer0", relative=True) == pytest.approx(0.3 / 2.6)


def _planted_results(monkeypatch, seeds, steps, curve):
    """The real-text protocol's results, planted: ``seeds`` runs per (depth, lr) with ``curve``."""
    from dataclasses import replace

    import figures.joma.text as FT

    cfg = replace(JT.JomaTextConfig.quick(), seeds=tuple(seeds), steps=steps, layers=(1, 2), sweep_lrs=(1e-4, 1e-3))
    pairs = [(1, cfg.lr), (2, cfg.lr), (cfg.sweep_layers, 1e-4), (cfg.sweep_layers, 1e-3)]
    runs = {(L, lr): [_traj([curve + 0.01 * s] * L, val_loss=1.0 if lr == 1e-3 else 2.0) for s in seeds]
            for L, lr in pairs}
    res = {"config": cfg, "runs": runs, "seconds": 10.0 * len(seeds),
           "depth": {L: runs[(L, cfg.lr)][0] for L in cfg.layers},
           "sweep": {lr: runs[(cfg.sweep_layers, lr)][0] for lr in cfg.sweep_lrs}}
    monkeypatch.setattr(FT, "corpus_available", lambda corpus=None: True)
    monkeypatch.setattr(FT, "results", lambda *a, **k: res)
    return FT


def test_text_claims_undecided_with_one_short_seed(monkeypatch):
    FT = _planted_results(monkeypatch, [1], 200, BOUNCE)
    out = {r.name: r for r in FT.text_claim_results(True, "cpu")}
    assert set(out) == {"wikitext_entropy_drop_and_bounce", "wikitext_stable_rank_drop_and_bounce",
                        "wikitext_bounce_at_best_lr"}
    for r in out.values():
        assert r.verdict == "inconclusive" and r.grade == "C" and r.regime_points == 0
        assert "not decided" in r.where_it_breaks and "GPU" in r.where_it_breaks
        doc = r.to_json()
        assert doc["seeds"] == 1 and all(p["values"] for p in doc["map"]["points"])


@pytest.mark.parametrize("curve,verdict", [(BOUNCE, "holds"), (MONOTONE, "fails")])
def test_text_claims_decided_over_five_long_seeds(monkeypatch, curve, verdict):
    """With >= 5 seeds of runs as long as the paper's, the points are decided over seeds: the
    bouncing curves hold, the monotone ones fail (the best lr: 1e-3, lowest validation loss)."""
    FT = _planted_results(monkeypatch, range(1, 6), 6900, curve)
    out = {r.name: r for r in FT.text_claim_results(True, "cpu")}
    ent = out["wikitext_entropy_drop_and_bounce"]
    assert ent.verdict == verdict and ent.seeds == 5 and ent.regime_points == 3  # layers of depths 1 and 2
    best = out["wikitext_bounce_at_best_lr"]
    assert best.verdict == verdict and best.regime_points == 1 and best.at == {"lr": 1e-3}
