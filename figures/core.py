"""Overlays of theory and practice, and the agreement numbers.

* :func:`agreement` — relative L2 error per observable between a theory trajectory (ODE) and a
  practice trajectory (training run), over the practice's logged times, after interpolating the
  theory onto them: ``|x_practice - x_theory|_2 / |x_theory|_2``.
* :func:`band` / :func:`band_coverage` — quantile bands of an SDE ensemble and the fraction of
  training-run points inside them.
* :func:`overlay` — one panel per observable: theory line, optional SDE band, practice runs, in
  the shared style (:mod:`figures.style`): at most three panels per row, one legend outside them,
  labels from the derivation's symbols.

Figures are written with :func:`save_figure` (atomic; PNG and a vector PDF beside it). Each paper's
figure functions return the data they plot, so tests check data, not pixels; :func:`finish_figure`
runs :func:`figures.style.lint` on every figure and records its problems with the collector
(``collecting(strict=True)`` raises :class:`FigureProblems` instead), so a test checks every
figure's labels and legends from its matplotlib objects.

:func:`figures.make.make_figures` is the one collector of a paper's outputs: the row's ``figures`` slot is a
sequence of figure functions ``fig_x(outdir | None, quick, *, device) -> data``; every file they
write through :func:`finish_figure` / :func:`save_table` / :func:`write_output` is recorded (no
figure function lists its own outputs); the row's claims (its ``claims`` slot) are decided and
their validity maps written under ``claims/``; and the paper's compare report is written beside
them as ``report.json``; a progress bar (:mod:`figures.progress`) names the figure being made.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from simulate.trajectory import atomic_write  # noqa: E402

from . import style  # noqa: E402

__all__ = ["agreement", "rel_l2", "band", "band_coverage", "overlay", "save_figure", "save_table", "finish_figure",
           "write_output", "collecting", "OUT_DIR", "FigureProblems"]

#: where figures, reports and claim stores go without --outdir: figures/out/ under the working directory
#: (relative, resolved when used; never inside the installed package: in a checkout, `make figures` runs
#: from the repository root, so this is the repository's figures/out/)
from .context import OUT_DIR  # noqa: E402  (re-exported)

style.use()  # one style for every figure of the package


class Collected(list):
    """What a :func:`collecting` block wrote (a list of paths, in order) and ``problems``: figure
    name -> the :func:`figures.style.lint` problems of each figure finished in the block."""

    def __init__(self, strict: bool = False):
        super().__init__()
        self.strict = strict
        self.problems: dict[str, list[str]] = {}


class FigureProblems(ValueError):
    """A figure failed :func:`figures.style.lint` inside ``collecting(strict=True)``."""


#: the collector of the innermost :func:`collecting` block (None: not collecting)
_WRITTEN: contextvars.ContextVar[Collected | None] = contextvars.ContextVar("tdyn_written", default=None)


@contextmanager
def collecting(strict: bool = False):
    """``with collecting() as written:`` — ``written`` lists every file the block writes through
    :func:`save_figure`, :func:`save_table` or :func:`write_output` (in order, without repeats), and
    ``written.problems`` the lint problems of every figure passed to :func:`finish_figure` (also
    when it is not saved); with ``strict`` a figure with problems raises :class:`FigureProblems`."""
    written = Collected(strict)
    token = _WRITTEN.set(written)
    try:
        yield written
    finally:
        _WRITTEN.reset(token)


def _record(path: Path) -> Path:
    written = _WRITTEN.get()
    if written is not None and path not in written:
        written.append(path)
    return path


def write_output(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Write one output file atomically (``write(tmp_path)``) and record it (see :func:`collecting`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return _record(path)


def rel_l2(practice: np.ndarray, theory: np.ndarray) -> float:
    theory = np.asarray(theory, float)
    practice = np.asarray(practice, float)
    denom = np.linalg.norm(theory)
    return float(np.linalg.norm(practice - theory) / denom) if denom > 0 else float(np.linalg.norm(practice))


def _interp(theory: xr.Dataset, name: str, times: np.ndarray) -> np.ndarray:
    return np.interp(times, theory["time"].values, theory[name].values, left=np.nan, right=np.nan)


def agreement(theory: xr.Dataset, practice: xr.Dataset, observables: Sequence[str] | None = None,
              t_max: float | None = None) -> dict[str, float]:
    """Relative L2 error per observable over the practice's logged times (``<= t_max``)."""
    names = observables or [n for n in practice.data_vars if n in theory.data_vars]
    times = practice["time"].values
    keep = np.ones_like(times, dtype=bool) if t_max is None else times <= t_max
    keep &= (times >= theory["time"].values[0]) & (times <= theory["time"].values[-1])
    out = {}
    for n in names:
        th = _interp(theory, n, times[keep])
        pr = practice[n].values
        pr = pr[..., keep] if pr.ndim == 1 else pr.reshape(-1, pr.shape[-1])[:, keep].mean(0)
        out[n] = rel_l2(pr, th)
    return out


def band(sde: xr.Dataset, name: str, lo: float = 0.1, hi: float = 0.9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(time, lower, upper)`` quantiles over the ``path`` dim of an SDE ensemble."""
    da = np.sort(sde[name].transpose("path", "time").values, axis=0)
    n = da.shape[0]
    # distribution-free prediction interval: order statistics X_(i), X_(j) with
    # i = floor((n+1) lo), j = ceil((n+1) hi), so a new draw from the same law falls inside with
    # probability (j - i)/(n + 1) >= hi - lo (plain sample quantiles give slightly less).
    i = max(int(np.floor((n + 1) * lo)), 1)
    j = min(int(np.ceil((n + 1) * hi)), n)
    return sde["time"].values, da[i - 1], da[j - 1]


def band_coverage(sde: xr.Dataset, runs: xr.Dataset, name: str, lo: float = 0.1, hi: float = 0.9,
                  t_min: float | None = None) -> float:
    """Fraction of (run, time) points of ``runs[name]`` (dims run, time) inside the SDE's
    ``[lo, hi]`` quantile band, interpolated onto the runs' times (``>= t_min``: skip the exact
    common start)."""
    t, lower, upper = band(sde, name, lo, hi)
    times = runs["time"].values
    keep = (times <= t[-1]) & (times >= (t_min if t_min is not None else -np.inf))
    L = np.interp(times[keep], t, lower)
    U = np.interp(times[keep], t, upper)
    Y = runs[name].transpose("run", "time").values[:, keep]
    return float(np.mean((Y >= L) & (Y <= U)))


def overlay(theory: xr.Dataset | None, practice: xr.Dataset | Sequence[xr.Dataset] | None,
            observables: Sequence[str], *, sde: xr.Dataset | None = None, labels=None, title: str = "",
            xlabel: str = "time $t$", quantiles=(0.1, 0.9), ylabels: Mapping[str, str] | None = None,
            system=None):
    """One panel per observable (at most three per row, then a grid): theory (solid black line),
    SDE band (shaded, dashed edges, drawn above the runs so that it stays visible), practice runs
    (thin translucent lines, :func:`figures.style.run_alpha`; one trained curve: dotted with markers)
    — apart in greyscale too — and one legend
    below the panels. A panel's y label is ``ylabels[name]``, else the symbol of ``name`` in
    ``system`` (a ReducedSystem: :func:`figures.style.symbol_labels`), else its name in words."""
    practice_list = [] if practice is None else ([practice] if isinstance(practice, xr.Dataset) else list(practice))
    names = {**(style.symbol_labels(system) if system is not None else {}), **(ylabels or {})}
    fig, axes = style.panels(len(observables))
    lo_q, hi_q = (int(round(q * 100)) for q in quantiles)
    for ax, name in zip(axes, observables):
        if sde is not None and name in sde:
            t, lo, hi = band(sde, name, *quantiles)
            ax.fill_between(t, lo, hi, **style.role("band"), label=f"SDE {lo_q}-{hi_q}% band")
            ax.plot(t, lo, **style.role("band_edge"))
            ax.plot(t, hi, **style.role("band_edge"))
        for i, pr in enumerate(practice_list):
            if name not in pr:
                continue
            da = pr[name]
            if "run" in da.dims:  # thin, translucent: many runs read as a density under the band
                n = da.sizes["run"]
                for j in range(n):
                    ax.plot(pr["time"], da.isel(run=j), **style.role("run", alpha=style.run_alpha(n)),
                            label=f"SGD runs ({n})" if j == 0 else None)
            else:
                kw = style.role("practice") if i == 0 else {"marker": "s^vD"[i % 4], "markersize": 3}
                ax.plot(pr["time"], da, **kw, markevery=max(1, da.size // 40), label=(labels[i] if labels else "trained"))
        if theory is not None and name in theory:
            ax.plot(theory["time"], theory[name], **style.role("theory"), label="ODE (theory)")
        ax.set_ylabel(style.quantity_label(name, names))
        ax.set_xlabel(xlabel)
    style.legend_outside(fig, axes)
    if title:
        fig.suptitle(title)
    return fig


def save_figure(fig, path: str | os.PathLike, dpi: int | None = None) -> Path:
    """Save a matplotlib figure atomically as ``path`` (PNG) and a vector PDF beside it (same
    name, ``.pdf``), then close it. Returns the PNG's path."""
    path = Path(path).with_suffix(".png") if Path(path).suffix in ("", ".pdf") else Path(path)
    try:
        write_output(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".")))
        write_output(path.with_suffix(".pdf"), lambda tmp: fig.savefig(tmp, format="pdf"))
    finally:
        plt.close(fig)
    return path


def save_table(table, outdir: str | os.PathLike | None, name: str, *, index: bool = False) -> Path | None:
    """Write ``table`` (a DataFrame, or a list of row dicts) as ``outdir/name`` CSV, atomically;
    nothing when ``outdir`` is None (figure functions called for their data only)."""
    import pandas as pd

    if outdir is None:
        return None
    df = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    return write_output(Path(outdir) / name, lambda tmp: df.to_csv(tmp, index=index))


def finish_figure(fig, outdir: str | os.PathLike | None, name: str) -> Path | None:
    """Lint ``fig`` (:func:`figures.style.lint`; problems recorded with the :func:`collecting`
    block, raised in strict mode), then save it as ``outdir/name`` + PDF (atomic) when an output
    folder is given, else just close it (figure functions called for their data only)."""
    collected = _WRITTEN.get()
    if collected is not None:
        problems = style.lint(fig)
        if problems:
            collected.problems[name] = problems
            if collected.strict:
                plt.close(fig)
                raise FigureProblems(f"{name}: " + "; ".join(problems))
    if outdir is None:
        plt.close(fig)
        return None
    return save_figure(fig, Path(outdir) / name)
