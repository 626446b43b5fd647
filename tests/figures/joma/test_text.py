"""figures/joma/text.py (and empirical/joma/text.py's per-layer summary): the real-text claims'
statistic on known curves, and their decision from per-seed runs (no corpus needed: the protocol's
results are planted)."""

import numpy as np
import pytest
import xarray as xr

from empirical.joma import text as JT
from figures.context import RunContext

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


def test_text_claims_untested_with_short_runs(monkeypatch):
    """Runs shorter than the paper's horizon put no point in the regime: every real-text claim is
    untested, saying why, what the short runs measured and what the paper's protocol costs."""
    FT = _planted_results(monkeypatch, range(1, 6), 200, BOUNCE)
    out = {r.name: r for r in FT.text_claim_results(RunContext(device="cpu"))}
    assert set(out) == {"wikitext_entropy_drop_and_bounce", "wikitext_stable_rank_drop_and_bounce",
                        "wikitext_bounce_at_best_lr"}
    for r in out.values():
        assert r.verdict == "untested" and r.regime_points == 0
        doc = r.to_json()
        why = doc["untested_reason"]
        assert "200 minibatches" in why and "6900" in why and "CPU" in why and "GPU-hours" in why, why
        assert all(p["values"] for p in doc["map"]["points"]) and doc["practice"] == "standard transformer"


def test_untested_reason_prices_the_protocol_from_the_measured_rates():
    """The cost is PROTOCOL_COST's (measured, full vocabulary) when given, else this run's own rate."""
    from dataclasses import replace

    import figures.joma.text as FT

    cfg = replace(JT.JomaTextConfig.quick(), seeds=(1,), steps=100)
    res = {"config": cfg, "runs": {(1, 1e-4): [None]}, "seconds": 36.0}  # 0.36 s per minibatch
    lower = FT.untested_reason(res, [0.1, -0.2], cost={})
    # 10 (depth, lr) runs x 12 seeds x 6900 minibatches x 0.36 s = 82.8 h
    assert ">= 83 CPU-hours" in lower and "1 of 2" in lower
    priced = FT.untested_reason(res, [0.1], cost={"cpu_core_seconds": 7200.0, "gpu_seconds": 5400.0, "gpu": "H100"})
    assert "~2 CPU core-hours" in priced and "~1.5 GPU-hours on one H100" in priced


@pytest.mark.parametrize("curve,verdict", [(BOUNCE, "holds"), (MONOTONE, "fails")])
def test_text_claims_decided_over_six_long_seeds(monkeypatch, curve, verdict):
    """With 6 seeds of runs as long as the paper's, the points are decided over seeds: the
    bouncing curves hold, the monotone ones fail (the best lr: 1e-3, lowest validation loss)."""
    FT = _planted_results(monkeypatch, range(1, 7), 6900, curve)
    out = {r.name: r for r in FT.text_claim_results(RunContext(device="cpu"))}
    ent = out["wikitext_entropy_drop_and_bounce"]  # 3 points (layers of depths 1 and 2): 6 seeds let both fire
    assert ent.verdict == verdict and ent.seeds == 6 and ent.regime_points == 3
    best = out["wikitext_bounce_at_best_lr"]
    assert best.verdict == verdict and best.regime_points == 1 and best.at == {"lr": 1e-3}
