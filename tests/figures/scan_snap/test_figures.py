"""figures/scan_snap/figures.py: the closed-form figure data (Figs. 3, 8, 9)."""

import numpy as np

from figures.scan_snap import figures as fs


def test_closed_form_figure_data():
    df8 = fs.fig8_h(None, True, device="cpu")
    assert np.all(df8.max_gap >= 0) and np.all(df8.max_gap <= df8.bound_2eta_over_M)  # Lemma 7
    df9 = fs.fig9_B(None, True, device="cpu")
    for nu, g in df9.groupby("nu"):  # B_n(t0) depends only on (K, M, nu), not on eta_Z
        np.testing.assert_allclose(g.B_at_t0.values, g.B_at_t0.values[0], rtol=1e-9)
        assert np.all(np.diff(g.B_end.values) > 0)  # larger eta_Z -> larger late B_n
    df3 = fs.fig3_growth(None, True, device="cpu")
    assert np.all(df3.chi_lower <= df3.chi_upper + 1e-12)
    # smaller eta_Y -> larger chi at the end (Prediction (c))
    end = df3[df3.t == df3.t.max()].sort_values("eta_Y")
    assert np.all(np.diff(end.chi_upper.values) < 0)
