"""Fig. 6 at full size (docs/papers/scan_snap.md §5.4): 4 panels x 4 eta_Z x 4 ratios x 10 seeds, 100 steps, default
init, float64 — the published-number check, with the spec's tolerance ("matched the published table
within seed noise"). Slow (``-m slow``).

The published table (``figure_6_data.pkl`` of the official repository) is held out of this project
(spec §0: published values are an acceptance check, not an input), so the comparison runs only where
a copy is supplied as CSV (columns num_last, eta_Z, ratio, mean, std, count) in
``$TDYN_SCAN_SNAP_FIG6_PUBLISHED``. The paper's stated trend (spec §4 item 8) is checked always."""

import os

import numpy as np
import pandas as pd
import pytest

from figures.scan_snap import figures as fs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def table():
    return fs.fig6_entropy(None, quick=False, device="cpu")


def test_fig6_entropy_falls_with_eta_Z_beyond_seed_noise(table):
    """Spec §4 item 8: the DT entropy decreases with eta_Z. Every (panel, ratio) cell: entropy at
    eta_Z = 3 below that at eta_Z = 0.5 by more than 2 standard errors of the difference."""
    assert len(table) == 64 and set(table["count"]) == {10}
    for (nl, r), g in table.groupby(["num_last", "ratio"]):
        lo, hi = g[g.eta_Z == 0.5].iloc[0], g[g.eta_Z == 3.0].iloc[0]
        se = np.sqrt(lo["std"] ** 2 / lo["count"] + hi["std"] ** 2 / hi["count"])
        assert hi["mean"] < lo["mean"] - 2 * se, (nl, r, lo["mean"], hi["mean"], se)
    # every entropy is below the maximum ln 10 of 10 distinct tokens (spec §4 item 12)
    assert table["mean"].max() < np.log(10)


@pytest.mark.skipif(not os.environ.get("TDYN_SCAN_SNAP_FIG6_PUBLISHED"), reason="published Fig. 6 table held out")
def test_fig6_matches_published_table_within_seed_noise(table):
    """Spec §5.4: our reimplementation matches the published table "within seed noise": per cell,
    |ours - published| <= 3 standard errors of the difference of two 10-seed means."""
    pub = pd.read_csv(os.environ["TDYN_SCAN_SNAP_FIG6_PUBLISHED"])
    m = table.merge(pub, on=["num_last", "eta_Z", "ratio"], suffixes=("", "_pub"))
    assert len(m) == 64
    se = np.sqrt(m["std"] ** 2 / m["count"] + m["std_pub"] ** 2 / m["count_pub"])
    bad = m[np.abs(m["mean"] - m["mean_pub"]) > 3 * se]
    assert bad.empty, bad
