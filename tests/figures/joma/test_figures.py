"""figures/joma/figures.py: the figure functions return the data they plot; files are written where
asked."""

import numpy as np
import pandas as pd

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
