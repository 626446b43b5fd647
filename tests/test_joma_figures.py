"""JoMA figure functions return the data they plot; files are written where asked."""

import pandas as pd

from figures import joma as F


def test_theorem2_figure_data(tmp_path):
    out = F.fig_theorem2(tmp_path)
    assert max(out["relative_errors"]) < 1e-6
    assert (tmp_path / "theorem2_closed_form.png").stat().st_size > 0


def test_table1_csv(tmp_path):
    out = F.fig_layers_and_table1(tmp_path, seeds=(0,), steps=20)
    table = pd.read_csv(tmp_path / "table1_hierarchy_alignment.csv", index_col=0)
    assert {"score0_pearson", "score1_pearson", "score0_cosine", "score1_cosine"} <= set(table.index)
    assert table["mean"].between(-1, 1).all()
    assert len(out["trajectories"]) == 1
