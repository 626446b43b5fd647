"""Progress: bars on stderr only on a terminal (or TDYN_PROGRESS=always), never with
--no-progress; an opaque step's ETA comes from its duration last time; grids of runs drive a bar
through empirical.sweeps' hook; make_figures names each figure it makes."""

import io
import sys
import time

from figures import progress


class _TTY(io.StringIO):
    def isatty(self):
        return True


def _tty(monkeypatch) -> _TTY:
    """stderr as a terminal (set inside the test: pytest's capture resets sys.stderr after setup)."""
    err = _TTY()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.delenv("TDYN_PROGRESS", raising=False)
    return err


def test_quiet_off_a_terminal_and_with_no_progress(monkeypatch):
    tty = _tty(monkeypatch)
    assert progress.active()
    with progress.enabled(False):
        assert not progress.active()
        for _ in progress.bar(range(3), desc="hidden"):
            pass
    assert "hidden" not in tty.getvalue()
    for _ in progress.bar(range(3), desc="shown"):
        pass
    assert "shown" in tty.getvalue() and "3/3" in tty.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    assert not progress.active()
    monkeypatch.setenv("TDYN_PROGRESS", "always")
    assert progress.active()


def test_task_eta_comes_from_the_last_run(monkeypatch, tmp_path):
    tty = _tty(monkeypatch)
    monkeypatch.setenv("TDYN_CACHE_DIR", str(tmp_path))
    with progress.task("compare toy"):
        time.sleep(0.05)
    first = tty.getvalue()
    assert "compare toy" in first and "ETA" not in first  # nothing known the first time
    assert 0.04 < progress._expected("compare toy") < 5
    with progress.task("compare toy"):
        pass
    assert "ETA" in tty.getvalue()[len(first):]


def test_run_cells_drives_a_bar_over_the_cells(tmp_path, monkeypatch):
    tty = _tty(monkeypatch)
    from empirical.sweeps import Cell, run_cells

    cells = [Cell("tiny", {"x": float(x)}, job="line", swept={"x": x}) for x in (1, 2, 3)]  # y = x t
    with progress.enabled(True):
        run_cells("helpers.sweep_cells:line", cells, tmp_path / "st", bar=progress.cell_bar)
    out = tty.getvalue()
    assert "3 cells to run" in out and "3/3" in out and "x=3 ok" in out
    tty.truncate(0)
    with progress.enabled(False):  # bars switched off: the factory draws nothing
        run_cells("helpers.sweep_cells:line", cells, tmp_path / "st2", bar=progress.cell_bar)
    assert "cells to run" not in tty.getvalue()
    with progress.enabled(True):
        run_cells("helpers.sweep_cells:line", cells, tmp_path / "st3")  # no bar= : no bar
    assert "cells to run" not in tty.getvalue()


def test_make_figures_names_each_figure(monkeypatch, tmp_path):
    tty = _tty(monkeypatch)
    import dataclasses

    from figures import papers
    from figures.make import make_figures

    def fig_one(outdir, quick, *, device):
        return 1

    def fig_two(outdir, quick, *, device):
        return 2

    scb = papers.PAPERS["scb"]
    row = dataclasses.replace(scb, name="tiny-progress", figures=(fig_one, fig_two), claims=None,
                              missing={**scb.missing, "claims": "two figures only"})
    monkeypatch.setitem(papers.PAPERS, "tiny-progress", row)
    make_figures("tiny-progress", tmp_path, report=False)
    out = tty.getvalue()
    assert "fig_one" in out and "fig_two" in out and "2/2" in out
