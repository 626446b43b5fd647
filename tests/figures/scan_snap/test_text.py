"""figures/scan_snap/text.py + text_claims.toml: the real-text claims (Figs. 10 and 7) as
ClaimResults decided over seeds. The statistics on hand-made runs; planted protocol results (no
corpus needed): in the paper's setting with >= 5 seeds a planted toy holds and a planted violation
fails; the quick protocol's shorter runs, or fewer than 5 seeds, stay inconclusive (grade C) with
the reason; the row's claims slot appends them to the registry's."""

import math

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from empirical.realtext import FULL_VOCAB
from empirical.scan_snap.text import ScanSnapTextConfig
from figures.context import RunContext
from figures.scan_snap import text as FT

LRS = (1.0, 3.0, 5.0)
FALLING = (2.0, 1.6, 0.9)  # entropy at LRS: secant slopes -0.2 and -0.35, least squares -0.275


def _sweep(entropy):
    return xr.Dataset({"entropy": ("lr", np.asarray(entropy, float))}, coords={"lr": list(LRS)})


def _fig7(entropy, changes):
    """A Fig. 7 run: validation entropy over 4 logged steps and 2x2 maps whose successive changes
    have Frobenius norms ``changes`` (each a move of the first row's mass)."""
    maps = [np.full((2, 2), 0.5)]
    for c in changes:
        d = c / 2  # moving d from one entry to the other in both rows: norm sqrt(4 d^2) = 2 d
        maps.append(maps[-1] + np.array([[d, -d], [d, -d]]))
    return xr.Dataset({"entropy_layer0": ("time", np.asarray(entropy, float)),
                       "snapshot": (("time", "query", "key"), np.stack(maps))}, coords={"time": np.arange(4)})


def test_statistics_on_known_runs():
    t = _sweep(FALLING)
    assert FT.entropy_lr_slope(t, lr=1.0) == pytest.approx(-0.2)
    assert FT.entropy_lr_slope(t, lr=3.0) == pytest.approx(-0.35)
    assert FT.entropy_lr_slope(t) == pytest.approx(-0.275)  # (-2 (0.5) + 2 (-0.6)) / 8
    assert math.isnan(FT.entropy_lr_slope(t, lr=5.0))  # no larger lr: no pair
    run = _fig7([3.0, 2.0, 1.8, 1.5], [0.4, 0.2, 0.1])
    assert FT.late_over_early(run, aspect="sparsity") == pytest.approx(math.log(0.5))
    assert FT.late_over_early(run, aspect="freezing") == pytest.approx(math.log(0.1 / 0.4))
    with pytest.raises(ValueError, match="aspect"):
        FT.late_over_early(run, aspect="rank")


def _results(seeds, fig7_seeds, *, paper_setting, slope, freeze_ratio):
    """The protocol's results, planted: per seed Fig. 10 entropies ``2 + slope lr`` (+ a seed
    offset) and Fig. 7 runs whose entropy falls 3 -> 1.5 and whose map's last change is
    ``freeze_ratio`` times its first."""
    setting = dict(sweep_steps=1725, steps=1500, vocab_size=FULL_VOCAB) if paper_setting else {}
    cfg = ScanSnapTextConfig.quick(seeds=tuple(seeds), fig7_seeds=tuple(fig7_seeds), sweep_lrs=LRS, **setting)
    rows = [{"lr": lr, "seed": s, "entropy": 2.0 + slope * lr + 0.01 * ((7 * s + i) % 3), "val_loss": 5.0}
            for s in seeds for i, lr in enumerate(LRS)]
    runs = {L: [_fig7([3.0, 2.2, 1.8, 1.5 + 0.01 * s], [0.4, 0.3, 0.4 * freeze_ratio * (1 + 0.02 * s)])
                for s in fig7_seeds] for L in cfg.layers}
    return {"config": cfg, "sweep": pd.DataFrame(rows), "fig7_runs": runs, "seconds": 30.0, "fig7_seconds": 10.0}


def _named(res):
    return {r.name: r for r in FT.decide(res, quick=True)}


def test_planted_toy_in_the_papers_setting_holds():
    out = _named(_results(range(1, 6), range(1, 6), paper_setting=True, slope=-0.2, freeze_ratio=0.25))
    assert list(out) == ["wikitext_higher_lr_lower_entropy", "wikitext_attention_sparsifies_and_freezes"]
    lr, fig7 = out.values()
    assert lr.verdict == "holds" and lr.seeds == 5 and lr.regime_points == 2 and lr.grade == "C"  # B needs 3 points
    assert lr.interval[1] < 0 and lr.point_level == pytest.approx(1 - 0.05 / 2)
    assert fig7.verdict == "holds" and fig7.regime_points == 4 and fig7.grade == "B"  # 2 models x 2 aspects
    assert fig7.where_it_breaks.startswith("no break found on the map")


def test_planted_violation_fails():
    # 'fails' over Fig. 7's 4 in-regime points (Holm) needs 7 seeds with the sign test (2^-n <= 0.05/4)
    out = _named(_results(range(1, 8), range(1, 8), paper_setting=True, slope=+0.2, freeze_ratio=2.0))
    lr, fig7 = out.values()
    assert lr.verdict == "fails" and lr.interval[0] > 0
    assert fig7.verdict == "fails" and fig7.at["aspect"] == "freezing" and fig7.interval[0] > 0


def test_fewer_than_five_seeds_or_the_quick_setting_stay_untested_or_inconclusive():
    # the quick protocol: outside the regime (shorter runs, capped vocabulary): untested, with why and
    # the cost (CPU core-hours measured at the run's rate, a GPU estimate)
    out = _named(_results(range(1, 6), (1,), paper_setting=False, slope=-0.2, freeze_ratio=0.25))
    lr, fig7 = out.values()
    assert lr.verdict == "untested" and lr.regime_points == 0 and lr.seeds == 5
    assert "minibatches = 120" in lr.untested_reason and "CPU core-hours" in lr.untested_reason
    assert "GPU" in lr.untested_reason
    assert fig7.verdict == "untested" and fig7.regime_points == 0
    assert "1 seed(s): a verdict needs >= 5" in fig7.untested_reason and "CPU-s per further seed" in fig7.untested_reason
    # in the paper's setting but with 4 seeds: still no verdict
    few = _named(_results(range(1, 5), range(1, 5), paper_setting=True, slope=-0.2, freeze_ratio=0.25))
    assert all(r.verdict == "inconclusive" and r.grade == "C" for r in few.values())


def test_claims_slot_appends_the_real_text_claims(monkeypatch):
    """The row's slot: registry claims, then text_claim_results; none without a corpus."""
    from figures.scan_snap import claims as C

    seen = []
    monkeypatch.setattr(C, "decide_registry", lambda ctx, **kw: seen.append(ctx) or ["registry"])
    monkeypatch.setattr(FT, "text_claim_results", lambda ctx: seen.append(ctx) or ["text"])
    monkeypatch.setattr(C, "snap_claim_result", lambda **kw: "snap")
    assert C.claims(quick=True, device="cpu") == ["registry", "snap", "text"]
    assert seen == [RunContext(quick=True, device="cpu")] * 2  # one context reaches both
    monkeypatch.undo()
    none = FT.text_claim_results(RunContext(device="cpu", corpus="/nonexistent/wikitext"))
    assert [r.verdict for r in none] == ["untested", "untested"] and "corpus" in none[0].untested_reason
    assert FT.text_registry().names == ["wikitext_higher_lr_lower_entropy", "wikitext_attention_sparsifies_and_freezes"]
