"""The SCB l1-vs-SGD study (figures/scb/l1.py): the figure's files, and the study through the sweep
store against the golden table (within its stored tolerance), resumed after a lost cell."""

from pathlib import Path

import pandas as pd

from empirical.scb import l1 as el1
from figures.scb import l1 as fl1
from helpers.golden import assert_matches_golden


def test_figure_writes_png_and_csv_of_the_study(tmp_path):
    """The figure saves both files; the CSV holds exactly the study's rows."""
    kw = dict(Ts=(16,), batches=(64,), seeds=(0, 1, 2), samples=300 * 64, n_log=15, horizon=100, n_grid=22,
              lam_multiples=(1.0,), methods=el1.METHODS)  # same settings as above: cached study
    data = fl1.fig_l1_vs_sgd(tmp_path, True, device="cpu", **kw)
    assert (tmp_path / "scb_l1_vs_sgd.png").stat().st_size > 1000
    csv = pd.read_csv(tmp_path / "scb_l1_study.csv")
    pd.testing.assert_frame_equal(csv[["method", "lam", "seed", "dist_P", "dist_A"]],
                                  data["study"][["method", "lam", "seed", "dist_P", "dist_A"]], check_exact=False, rtol=1e-12)
    assert set(data["selected"].method) == {"l1", "l1_proj"}


TINY = dict(Ts=(16,), batches=(32, 64), seeds=(0, 1), samples=120 * 64, n_log=10, horizon=60, n_grid=22,
            lam_multiples=(1.0,), methods=("l1", "sgd"))


def test_study_through_the_sweep_store_is_unchanged_and_resumes(tmp_path):
    """The study run as sweep cells gives exactly the table the pre-sweep code gave
    (tests/data/scb_l1_study_tiny.csv, written by the direct loop of commit 6dc906b with these
    settings; floats within the tolerance stored beside it, as another machine's last bits may
    differ); a second call reads the same store back, so it must give the identical table computes no cell; after losing one finished cell (an interrupted
    sweep) a rerun computes just that cell and the table is again the same."""
    from empirical.sweeps import read_index

    store = tmp_path / "store"
    fl1._STUDIES.clear()
    df = fl1.l1_study(True, device="cpu", store=store, **TINY)
    n_cells = 2 * 2 + 2  # lr searches per (batch, method) + one runs cell per batch
    assert df.attrs["cells_computed"] == n_cells
    assert_matches_golden(df, Path(__file__).parents[2] / "data" / "scb_l1_study_tiny.csv")
    idx = read_index(store)
    assert len(idx) == n_cells and set(idx.status) == {"ok"} and set(idx.part) == {"lr", "runs"}
    fl1._STUDIES.clear()
    again = fl1.l1_study(True, device="cpu", store=store, **TINY)
    assert again.attrs["cells_computed"] == 0
    pd.testing.assert_frame_equal(again, df, check_exact=True)
    lost = idx[idx.part == "runs"].file.iloc[0]
    (store / lost).unlink()
    fl1._STUDIES.clear()
    resumed = fl1.l1_study(True, device="cpu", store=store, **TINY)
    assert resumed.attrs["cells_computed"] == 1
    pd.testing.assert_frame_equal(resumed, df, check_exact=True)
