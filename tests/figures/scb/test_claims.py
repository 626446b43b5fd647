"""SCB claims (figures/scb/claims.py): the l1 study's claims follow from the study's rows; the
escape-time claim from the escape figure's CSV."""

import numpy as np
import pytest

from empirical.scb import l1 as el1
from figures.scb import claims as fcl
from figures.scb import l1 as fl1
from theory import scb


def test_claims_names_keys_and_verdict():
    """Tiny study: both claims present with the contract's fields, and the verdicts follow from the
    study's rows (recomputed here from the DataFrame)."""
    kw = dict(Ts=(16,), batches=(64,), seeds=(0, 1, 2), samples=300 * 64, n_log=15, horizon=100, n_grid=22,
              lam_multiples=(1.0,), methods=el1.METHODS)
    df = fl1.l1_study(True, device="cpu", **kw)
    assert {"method", "lr", "lam", "batch", "seed", "nnz_mean", "nnz_max", "support_recovered", "dist_P",
            "dist_A", "samples_at_early_stop"} <= set(df.columns)
    assert len(df) == 2 * 3 * (1 + 3 + 3)  # 2 lr backoffs x 3 seeds x (sgd + l1, l1_proj at 3 lams)
    df = df[df.lr_backoff == 1]
    claims = {c.name: c for c in fcl.l1_claims(True, device="cpu", **kw)}
    assert set(claims) == {"l1_beats_sgd", "l1_recovers_support"}
    for c in claims.values():
        j = c.to_json()
        assert set(j) == {"name", "statement", "holds", "evidence", "regime"} and isinstance(j["holds"], bool)
    ev = claims["l1_beats_sgd"].evidence
    l1 = df[(df.method == "l1") & (df.lam == ev["lam"])]
    sgd = df[df.method == "sgd"]
    assert ev["lam"] > 0
    want = l1.dist_P.median() < sgd.dist_P.median() and l1.dist_A.median() < sgd.dist_A.median()
    assert claims["l1_beats_sgd"].holds == want
    assert claims["l1_recovers_support"].holds == (l1.support_recovered.mean() >= 0.8)
    assert set(claims["l1_beats_sgd"].evidence["by_regime"]) == {"T=16,B=64"}
    paper = df[(df.method == "l1")].lam.unique()
    assert np.isclose(sorted(paper)[1], 0.1 * scb.make_task(scb.SCBConfig(N=3, T=16, Q=2)).K / (4 * 27))


@pytest.mark.slow
def test_escape_time_figure_csv_and_claim_use_the_real_sgd_points(tmp_path):
    """Quick escape-time figure: its CSV holds the fused-kernel SGD rows with their relative error
    to the ODE, and the escape_time_log_T claim's evidence is recomputed from the CSV."""
    import pandas as pd

    from figures.scb import claims as compare
    from figures.scb import figures as S

    S.fig_escape_time(tmp_path, True, device="cpu")
    df = pd.read_csv(tmp_path / "scb_escape_time.csv")
    fast = df[df.source == "sgd_fast"]
    assert sorted(fast["T"].unique()) == [64.0, 256.0]
    np.testing.assert_allclose(fast.rel_err_vs_ode, (fast.escape_time - fast.ode_same_task).abs() / fast.ode_same_task)
    claim = compare.escape_time_claim(df)
    want = fast.groupby("T").escape_time.mean()
    np.testing.assert_allclose(claim.evidence["sgd_fast_escape_mean"], want.values)
    assert claim.holds == bool(np.all(np.asarray(claim.evidence["sgd_fast_vs_ode_rel"]) <= compare.SGD_ESCAPE_TOL)
                               and np.all(np.asarray(claim.evidence["sgd_vs_ode_rel"]) <= compare.SGD_ESCAPE_TOL)
                               and np.all(np.asarray(claim.evidence["ode_vs_formula_rel"]) <= compare.ESCAPE_TOL)
                               and abs(claim.evidence["ode_slope_per_decade"]
                                       / claim.evidence["predicted_slope_per_decade"] - 1) <= compare.ESCAPE_TOL)
