"""SCB theory vs practice (figures/scb/compare.py): the trained network follows the ODE, the SDE
bands are calibrated, the transfer table and its claim."""

import numpy as np

from figures import scb as fscb
from theory import scb


def test_trained_network_follows_the_ode():
    """Theory vs practice (acceptance 3 at a smaller size): small lr, large batch, through the
    stage-1 escape; rel_l2 <= 0.05 for the correlation observables."""
    cfg = scb.SCBConfig(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=2048, steps=300, log_every=7)
    report = fscb.compare.compare(config=cfg, device="cpu", breakdown=False, claims=False)
    for name in scb.CORRELATION_OBSERVABLES:
        assert report.observable(name).rel_l2 <= fscb.TOLERANCE, report.table()
        assert report.observable(name).tolerance == fscb.TOLERANCE
    assert report.agreement_passed
    # the run went through the escape: beta crossed 1/2 within the run, at the ODE's time +-10%
    esc = report.details["escape_time"]
    assert np.isfinite(esc["trained"]) and abs(esc["trained"] - esc["ode"]) / esc["ode"] < 0.1


def test_sde_bands_are_calibrated_at_small_batch():
    """At batch 32 the central 50/80/90% bands of 256 SDE paths (minibatch noise
    estimated from per-sample gradients) cover that fraction of the t > 0 points of 32 SGD runs,
    within +-5 points (the band's order statistics give (j-i)/(n+1) = 50.2/80.5/90.7% for a
    perfect noise model; 32 runs give a standard error of ~2-3 points)."""
    data = fscb.fig_overlay(None, quick=True, device="cpu")
    assert data["sgd"].sizes["run"] == 32 and data["sde"].sizes["path"] == 256
    for level, per_name in data["coverage"].items():
        for name, cov in per_name.items():
            assert abs(cov - float(level)) <= 0.05, (level, name, cov)
    # and the ensemble is not trivially wide: its mean tracks the SGD mean
    for name in scb.CORRELATION_OBSERVABLES:
        m_sde = data["sde"][name].mean("path").values
        m_sgd = data["sgd"][name].mean("run").values
        assert np.max(np.abs(m_sde - m_sgd)) < 0.1 * np.max(np.abs(m_sde))


def test_transfer_table_is_the_claims_runs(monkeypatch):
    """The transfer figure's table is the ``transfer_skips_stage1`` claim's runs at a map point
    (T = 16, two seeds): per seed one scratch row and one per pretraining length, with the claim's
    escapes, the ODE's from the same start, and the pretrained V's correlation (docs/papers/scb.md §5: the
    pretrained start escapes sooner than scratch, as its ODE says)."""
    from figures.claims import registry
    from figures.scb import claims as C
    import sys

    cmp = sys.modules["figures.scb.compare"]

    cfg = registry("scb").get("transfer_skips_stage1").protocol.config(scb.SCBConfig, True).replace(T=16)
    runs = C.transfer_runs(cfg, seeds=[0, 1])
    monkeypatch.setattr(C, "map_runs", lambda name, *, quick=True, device="cpu": [({"T": 16}, cfg, runs)])
    cmp._transfer_table.cache_clear()
    try:
        df = fscb.fig_transfer(None, quick=True, device="cpu")
    finally:
        cmp._transfer_table.cache_clear()
    assert len(df) == 2 * (1 + len(C.PRETRAIN))
    for s, r in enumerate(runs):
        g = df[df.seed == s].set_index("start")
        assert g.loc["scratch", "escape_steps"] == float(r["escape_scratch"])
        for p in C.PRETRAIN:
            row = g.loc[f"pretrained V ({p:g} t*)"]
            assert row.escape_steps == float(r["escape_transfer"].sel(pretrain=p))
            assert row.samples == row.escape_steps * cfg.batch and row.zeta0 > 0
            assert row.escape_steps < g.loc["scratch", "escape_steps"]
