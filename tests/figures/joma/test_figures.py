"""figures/joma/figures.py: the figure functions return the data they plot; files are written where
asked."""

import numpy as np
import pandas as pd

from figures.core import collecting
from figures.joma import figures as F


def test_theorem2_figure_data(tmp_path):
    out = F.fig_theorem2(tmp_path)
    assert max(out["relative_errors"]) < 1e-6
    assert (tmp_path / "theorem2_closed_form.png").stat().st_size > 0


def test_table1_csv_aggregates_the_runs(tmp_path):
    """The CSV's mean/std are those of the runs' final scores (recomputed here from the returned
    trajectories), one row per score."""
    out = F.fig_layers_and_table1(tmp_path, quick=True)
    table = pd.read_csv(tmp_path / "table1_hierarchy_alignment.csv", index_col=0)
    assert {"score0_pearson", "score1_pearson", "score0_cosine", "score1_cosine"} <= set(table.index)
    for name in table.index:
        finals = np.array([tr[name].values[-1] for tr in out["trajectories"]])
        assert abs(table.loc[name, "mean"] - finals.mean()) < 1e-12
        assert abs(table.loc[name, "std"] - finals.std()) < 1e-12
    assert (table["n_seeds"] == len(out["trajectories"])).all()


def test_restyled_figures_pass_the_lint_strictly():
    """The restyled JoMA figures, read from the matplotlib objects: colourbars on the U^T W
    heatmaps (Fig. 3), labelled axes, every curve named in a legend that covers no data, no
    internal names in titles (Fig. 4 said "fig_headline"), at most three panels per row."""
    with collecting(strict=True) as written:
        for fig in (F.fig3_component_growth, F.fig4_nonlinear, F.fig_theorem2, F.fig_block_overlay):
            fig(None, True, device="cpu")
    assert written.problems == {}


def test_fig4_drop_and_bounce_share_one_time_axis():
    """Fig. 4's right panel no longer puts three curves on their own time axes: each is drawn over
    t / t_min, so every curve's entropy minimum sits at 1 (t_min recomputed here from the data)."""
    out = F.fig4_nonlinear(None, True)
    for key, ds in (("exp_ode", out["exp_ode"]), ("trained", out["trained"])):
        t, H = ds["time"].values[1:], ds["attention_entropy"].values[1:]
        assert abs(out["t_min"][key] - t[np.argmin(H)]) <= 1e-12 * t[-1]
        assert 0 < out["t_min"][key] < t[-1]  # a drop then a bounce: the minimum is inside the window
