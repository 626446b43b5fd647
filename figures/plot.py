"""``tdyn plot FILE.nc [--vs OTHER.nc ...]``: the observables of any saved trajectory, in the shared
style (:mod:`figures.style`).

Each trajectory is drawn by what it is (its ``source`` attribute and dims): an ODE solve as the
theory line, an SDE ensemble (dim ``path``) as a 10-90 % band with its median, stacked training
runs (dim ``run``) as one thin line per seed with their mean, a single training run as the trained
curve with markers. With ``--vs``, the observables the files share are overlaid, theory vs
practice. Labels use the derivation's symbols where the paper's systems name the quantity.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from theory.errors import ConfigError

from . import style
from .core import band, save_figure

__all__ = ["plot_trajectories", "plot_file", "observables_of"]

#: variables of a training trajectory that are bookkeeping, not observables
_SKIP = ("step",)


def observables_of(ds: xr.Dataset) -> list[str]:
    """The plottable variables of a trajectory: numeric, along ``time``, not bookkeeping."""
    return [n for n in ds.data_vars if "time" in ds[n].dims and n not in _SKIP
            and np.issubdtype(ds[n].dtype, np.number)]


def _labels(datasets: Sequence[xr.Dataset]) -> dict[str, str]:
    """Mathtext labels from the papers' systems (every system of each file's paper; none when the
    paper is unknown or its systems cannot be built)."""
    from .papers import PAPERS

    out: dict[str, str] = {}
    for paper in {ds.attrs.get("paper") for ds in datasets}:
        row = PAPERS.get(paper)
        if row is None:
            continue
        try:
            for system in row.slot("systems")(row.Config()):
                for k, v in style.symbol_labels(system).items():
                    out.setdefault(k, v)
        except Exception:  # noqa: BLE001 - labels only: fall back to words
            continue
    return out


def _describe(ds: xr.Dataset) -> str:
    what = {"ode": "ODE", "sde": "SDE", "train": "trained"}.get(ds.attrs.get("source", ""), "trajectory")
    system = style.words(str(ds.attrs.get("system", "")))
    return f"{what} ({system})" if system else what


def _draw(ax, ds: xr.Dataset, name: str, k: int) -> None:
    da, t = ds[name], ds["time"].values
    label = _describe(ds)
    if "path" in da.dims:
        lo_t, lo, hi = band(ds, name)
        ax.fill_between(lo_t, lo, hi, **style.role("band"), label=f"{label}: 10-90% of {da.sizes['path']} paths")
        ax.plot(t, da.median("path"), **style.role("band_edge"), label=f"{label}: median")
    elif "run" in da.dims:
        for j in range(da.sizes["run"]):
            ax.plot(t, da.isel(run=j), **style.role("run"), label=f"{label}: {da.sizes['run']} seeds" if j == 0 else None)
        ax.plot(t, da.mean("run"), **style.role("practice"), label=f"{label}: mean over seeds")
    elif ds.attrs.get("source") == "train":
        kw = style.role("practice") if k == 0 else style.role("practice", marker="s^vD"[k % 4], color=f"C{k}")
        ax.plot(t, da, **kw, markevery=max(1, t.size // 40), label=label)
    else:
        kw = style.role("theory") if k == 0 else style.role("theory_alt")
        ax.plot(t, da, **kw, label=label)


def plot_trajectories(main: xr.Dataset, others: Sequence[xr.Dataset] = (), observables: Sequence[str] | None = None):
    """A figure with one panel per observable of ``main`` (or ``observables``) — only those every
    trajectory has when ``others`` are given — each trajectory drawn by its kind (module
    docstring), one legend below the panels."""
    datasets = [main, *others]
    names = list(observables) if observables else [n for n in observables_of(main)
                                                    if all(n in ds.data_vars for ds in others)]
    missing = [n for n in names if any(n not in ds.data_vars for ds in datasets)]
    if missing:
        raise ConfigError("observables", f"not in every trajectory: {', '.join(missing)}; "
                                         f"common: {', '.join(_common(datasets)) or 'none'}")
    if not names:
        raise ConfigError("vs", f"the trajectories share no observable (first has {', '.join(observables_of(main))})")
    labels = _labels(datasets)
    fig, axes = style.panels(len(names))
    order = sorted(range(len(datasets)), key=lambda i: datasets[i].attrs.get("source") == "ode")  # theory on top
    for ax, name in zip(axes, names):
        for k in order:
            _draw(ax, datasets[k], name, k)
        ax.set_ylabel(style.quantity_label(name, labels))
        ax.set_xlabel(style.axis_label("time", symbol="$t$"))
    style.legend_outside(fig, axes)
    return fig


def _common(datasets) -> list[str]:
    return [n for n in observables_of(datasets[0]) if all(n in ds.data_vars for ds in datasets[1:])]


def plot_file(path: str | os.PathLike, vs: Sequence[str | os.PathLike] = (), out: str | os.PathLike | None = None,
              observables: Sequence[str] | None = None) -> Path:
    """Plot the trajectory in ``path`` (and overlay ``vs``) into ``out`` (default: ``path`` with
    ``.png``) plus a PDF beside it. Returns the PNG's path."""
    import simulate

    main = simulate.load(path)
    others = [simulate.load(p) for p in vs]
    fig = plot_trajectories(main, others, observables)
    return save_figure(fig, Path(out) if out is not None else Path(path).with_suffix(".png"))
