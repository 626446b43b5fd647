"""figures/core.py: agreement numbers against their definitions, SDE quantile bands, and the one
collector of a paper's outputs (make_figures: every file a figure function writes, plus report.json)."""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr

from figures.context import RunContext
from figures.core import agreement, band, band_coverage, collecting, finish_figure, rel_l2, save_table, write_output
from figures.make import make_figures
from figures.papers import PAPERS, Paper, register
from figures.report import Observable, Report
from theory import ParamsBase


def _traj(t, **vs):
    return xr.Dataset({k: ("time", np.asarray(v, float)) for k, v in vs.items()}, coords={"time": np.asarray(t, float)})


def test_agreement_is_rel_l2_on_the_practice_times():
    theory = _traj([0, 1, 2, 3, 4], x=[0, 2, 4, 6, 8])
    practice = _traj([0.5, 1.5, 2.5, 9.0], x=[1.1, 3.0, 5.0, 0.0])  # t=9 lies beyond the theory: dropped
    want = np.linalg.norm([0.1, 0.0, 0.0]) / np.linalg.norm([1.0, 3.0, 5.0])
    assert agreement(theory, practice)["x"] == pytest.approx(want, rel=1e-12)
    assert agreement(theory, practice, t_max=1.0)["x"] == pytest.approx(0.1, rel=1e-12)
    assert rel_l2([1.0, 2.0], [0.0, 0.0]) == pytest.approx(np.sqrt(5))  # zero theory: absolute norm


def test_band_uses_order_statistics_and_coverage_counts_points():
    n = 99
    sde = xr.Dataset({"x": (("path", "time"), np.tile(np.arange(n, dtype=float)[:, None], (1, 3)))},
                     coords={"time": [0.0, 1.0, 2.0]})
    t, lo, hi = band(sde, "x", 0.1, 0.9)
    # i = floor(100 * 0.1) = 10, j = ceil(100 * 0.9) = 90: the 10th and 90th smallest (values 9 and 89)
    np.testing.assert_array_equal(lo, [9.0] * 3)
    np.testing.assert_array_equal(hi, [89.0] * 3)
    runs = xr.Dataset({"x": (("run", "time"), [[10.0, 50.0, 95.0], [5.0, 20.0, 30.0]])},
                      coords={"time": [0.0, 1.0, 2.0]})
    assert band_coverage(sde, runs, "x") == pytest.approx(4 / 6)
    assert band_coverage(sde, runs, "x", t_min=0.5) == pytest.approx(3 / 4)


def test_collecting_records_every_output_once(tmp_path):
    with collecting() as written:
        save_table([{"a": 1}], tmp_path, "t.csv")
        assert save_table([{"a": 1}], None, "t.csv") is None  # data only: nothing written
        fig = plt.figure()
        finish_figure(fig, tmp_path / "sub", "f.png")
        write_output(tmp_path / "t.csv", lambda tmp: Path(tmp).write_text("a\n2\n"))  # rewritten: listed once
    assert written == [tmp_path / "t.csv", tmp_path / "sub" / "f.png", tmp_path / "sub" / "f.pdf"]  # PNG + vector PDF
    assert (tmp_path / "t.csv").read_text() == "a\n2\n"


def fig_one(outdir, quick, *, device):
    save_table([{"quick": quick, "device": device}], outdir, "one.csv")
    return {"quick": quick}


def fig_two(outdir, quick, *, device):
    finish_figure(plt.figure(), outdir, "two.png")


def fig_three(outdir, quick, *, device, ctx):
    """Declares ``ctx``: make_figures hands it the run's RunContext."""
    save_table([{"quick": ctx.quick, "device": ctx.device, "store": ctx.store, "outdir": ctx.outdir}], outdir,
               "three.csv")


def _compare(ctx=None, *, quick=None, device=None):
    ctx = RunContext.of(ctx, quick=quick, device=device)
    return Report("collector", f"quick={ctx.quick} store={ctx.store}", [Observable("x", 0.01, 0.05)])


@pytest.fixture
def row():
    r = register(Paper(name="collector", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
                       compare=_compare, figures=(fig_one, fig_two, fig_three),
                       missing={s: "test row" for s in ("sde", "estimate", "text", "claims")}))
    yield r
    PAPERS.pop("collector")


def test_make_figures_collects_outputs_and_writes_the_report(row, tmp_path):
    out = tmp_path / "out"
    written = make_figures("collector", out, RunContext(store="S"), quick=False, device="cpu")
    assert written == [out / "one.csv", out / "two.png", out / "two.pdf", out / "three.csv", out / "report.json"]
    assert (out / "one.csv").read_text().splitlines() == ["quick,device", "False,cpu"]
    # the figure that declares ctx gets the run's context (quick/device given, the store, outdir = out)
    assert (out / "three.csv").read_text().splitlines() == ["quick,device,store,outdir", f"False,cpu,S,{out}"]
    assert json.loads((out / "report.json").read_text())["regime"] == "quick=False store=S"
    assert make_figures("collector", tmp_path / "o2", report=False) == [tmp_path / "o2" / "one.csv",
                                                                       tmp_path / "o2" / "two.png",
                                                                       tmp_path / "o2" / "two.pdf",
                                                                       tmp_path / "o2" / "three.csv"]
