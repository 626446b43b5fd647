"""Scan & Snap Fig. 6 through the sweep runner: one cell = one (panel, eta_Z)
row with its ratios x seeds trained in one vectorised call; the store makes the grid resumable. On
a tiny grid (#last = 1, eta_Z in {0.5, 3}, ratios {1, 10}, 2 seeds, 5 steps):

* a second run through the same store computes no cell and returns the identical table;
* a grid whose cell raises on its first call records the failure, the others finish; the rerun
  computes that cell only, and the result equals an uninterrupted run: no cell lost or duplicated;
* local worker processes give the same table as the in-process run (cells are seeded per cell)."""

import os
from pathlib import Path

import pandas as pd
import pytest

from empirical.sweeps import read_index
from figures.scan_snap.fig6 import CellsFailed, fig6_cells, fig6_table

HERE = Path(__file__).resolve().parents[2]  # tests/: helpers.scan_snap_fig6_cells
ROOT = HERE.parent
TINY = dict(panels=(1,), seeds=2, steps=5, eta_Z=(0.5, 3.0), ratios=(1.0, 10.0))


@pytest.fixture(autouse=True)
def _importable_helpers(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(HERE)]))


def _run(store, **kw):
    computed = []
    table = fig6_table(**TINY, store=store, progress=lambda key, st, err: computed.append((key, st)), **kw)
    return table, computed


def _complete(store):
    idx = read_index(store)
    keys = {c.key for c in fig6_cells(TINY["panels"], TINY["seeds"], steps=TINY["steps"], eta_Z=TINY["eta_Z"],
                                     ratios=TINY["ratios"])}
    assert set(idx["key"]) == keys and idx["key"].is_unique and set(idx["status"]) == {"ok"}
    assert sorted(p.stem for p in (Path(store) / "cells").iterdir()) == sorted(keys)


def test_fig6_store_second_run_computes_nothing(tmp_path):
    first, computed = _run(tmp_path / "s")
    assert len(computed) == 2 and {s for _, s in computed} == {"ok"}
    assert len(first) == 4 and set(first["count"]) == {2}
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "s" / "cells").iterdir()}
    again, computed = _run(tmp_path / "s")
    assert computed == []
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "s" / "cells").iterdir()} == mtimes
    pd.testing.assert_frame_equal(first, again)
    _complete(tmp_path / "s")


def test_fig6_interrupted_grid_resumes_without_loss_or_duplicates(tmp_path, monkeypatch):
    reference, _ = _run(tmp_path / "ref")
    monkeypatch.setenv("TDYN_FIG6_FLAKY", str(tmp_path))
    monkeypatch.setenv("TDYN_FIG6_FLAKY_CELL", "1,3.0")
    fn = "helpers.scan_snap_fig6_cells:flaky_cell"
    with pytest.raises(CellsFailed, match="1 of "):
        _run(tmp_path / "s", cell_fn=fn)
    idx = read_index(tmp_path / "s")
    assert sorted(idx["status"]) == ["failed", "ok"] and "interrupted" in idx[idx.status == "failed"]["error"].iloc[0]
    table, computed = _run(tmp_path / "s", cell_fn=fn)
    assert [s for _, s in computed] == ["ok"]  # only the failed cell ran again
    _complete(tmp_path / "s")
    pd.testing.assert_frame_equal(table, reference)


def test_fig6_local_processes_match_in_process(tmp_path):
    here, _ = _run(tmp_path / "a")
    there, computed = _run(tmp_path / "b", workers=2)
    assert len(computed) == 2
    pd.testing.assert_frame_equal(here, there)
