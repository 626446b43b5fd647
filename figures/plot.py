"""``tdyn plot FILE.nc [--vs OTHER.nc ...]``: the observables of any saved trajectory, in the shared
style (:mod:`figures.style`).

Each trajectory is drawn by what it is (its ``source`` attribute and dims): an ODE solve as the
theory line, an SDE ensemble (dim ``path``) as a 10-90 % band with its median, stacked training
runs (dim ``run``) as one thin line per seed with their mean, a single training run as the trained
curve with markers. With ``--vs``, the observables the files share are overlaid, theory vs
practice (files of one paper only: papers measure time in different units). Labels use the
derivation's symbols where the paper's systems name the quantity (the file's own system first).

By default a file shows its paper's headline observables (:data:`HEADLINE`, the quantities each
paper's claims and SDE calibration are about), at most :data:`MAX_PANELS` panels, a quantity
that repeats another exactly shown once; ``tdyn train`` / ``tdyn simulate`` print the same
observables' final values (:func:`summary`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from theory.errors import ConfigError

from . import style
from .core import band, save_figure

__all__ = ["plot_trajectories", "plot_file", "observables_of", "headline_observables", "time_unit", "summary",
           "HEADLINE", "MAX_PANELS"]

#: variables of a training trajectory that are bookkeeping, not observables
_SKIP = ("step",)
#: the most panels of a default plot (and rows of the summary table)
MAX_PANELS = 6
#: each paper's headline observables, first those its claims and SDE calibration are about
#: (docs/papers/<p>.md), then its loss; a file shows those it has, then others up to MAX_PANELS
HEADLINE = {
    "scb": ("value_transition_correlation", "attention_target_overlap", "population_loss", "loss"),
    "scan-snap": ("z_dt_0", "z_c", "Y_own_0", "dt_entropy", "population_loss", "loss"),
    "joma": ("v_1_1", "z_1", "z_3", "invariant_1", "population_loss", "loss"),
    "topic": ("block_difference", "A", "B", "C", "topic_mode", "population_loss", "loss"),
}


def observables_of(ds: xr.Dataset) -> list[str]:
    """The plottable variables of a trajectory: numeric, along ``time``, not bookkeeping."""
    return [n for n in ds.data_vars if "time" in ds[n].dims and n not in _SKIP
            and np.issubdtype(ds[n].dtype, np.number)]


def natural_key(name: str) -> list:
    """Sort key that orders numbers by value (``z_0_2`` before ``z_0_10``)."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def headline_observables(ds: xr.Dataset, limit: int = MAX_PANELS) -> list[str]:
    """At most ``limit`` observables of ``ds``: its paper's :data:`HEADLINE` ones it has, then the
    others in natural order; a variable equal to one already chosen (the same quantity under two
    names, e.g. a state and the observable defined as it) is skipped."""
    names = observables_of(ds)
    first = [n for n in HEADLINE.get(ds.attrs.get("paper"), ()) if n in names]
    chosen: list[str] = []
    for n in first + sorted((n for n in names if n not in first), key=natural_key):
        if len(chosen) == limit:
            break
        if not any(ds[n].shape == ds[m].shape and np.array_equal(ds[n].values, ds[m].values, equal_nan=True)
                   for m in chosen):
            chosen.append(n)
    return chosen


def time_unit(ds: xr.Dataset) -> str | None:
    """The unit of the file's time axis from its recorded config (``Config.ode_time``): ``"optimiser
    steps"`` or ``"1 = 2 optimiser steps"``; ``None`` when the config cannot be read."""
    from .papers import PAPERS

    row = PAPERS.get(ds.attrs.get("paper"))
    try:
        cfg = row.Config.from_dict(json.loads(ds.attrs["config"]))
        per_step = float(cfg.ode_time(1))
    except Exception:  # noqa: BLE001 - an unknown paper or an old file: no unit given
        return None
    return "optimiser steps" if per_step == 1.0 else f"1 = {1.0 / per_step:.4g} optimiser steps"


def summary(ds: xr.Dataset, limit: int = MAX_PANELS) -> list[str]:
    """A short table (lines) of the headline observables at the last time point: the final value;
    for an SDE ensemble (dim ``path``) or stacked runs (dim ``run``) the mean and the 10-90 % band."""
    names = headline_observables(ds, limit)
    spread = next((d for d in ("path", "run") if any(d in ds[n].dims for n in names)), None)
    unit = time_unit(ds)
    t_end = f"t = {float(ds['time'].values[-1]):.6g}" + (f" ({unit})" if unit else "")
    width = max([len(n) for n in names] + [10])
    if spread is None:
        lines = [f"  {'observable':{width}s}  final value at {t_end}"]
        lines += [f"  {n:{width}s}  {float(ds[n].values[..., -1].mean()): .6g}" for n in names]
    else:
        what = f"{ds.sizes[spread]} {'paths' if spread == 'path' else 'runs'}"
        lines = [f"  {'observable':{width}s}  {'mean':>12s}  10-90% band over {what}, at {t_end}"]
        for n in names:
            v = ds[n].isel(time=-1).values.reshape(-1)
            lo, hi = np.quantile(v, [0.1, 0.9])
            lines.append(f"  {n:{width}s}  {v.mean():12.6g}  [{lo:.6g}, {hi:.6g}]")
    rest = len(observables_of(ds)) - len(names)
    if rest > 0:
        lines.append(f"  ({rest} more observables in the file; tdyn plot FILE.nc --observables A,B shows any)")
    return lines


def _symbol(name: str) -> str | None:
    """A name built like a symbol with subscripts (``E_a_1``, ``xi_2``, ``Y_own_0``) as mathtext
    (``$E_{a,1}$``); ``None`` for a name in words (``population_loss``)."""
    from sympy.printing.latex import greek_letters_set

    head, *subs = name.split("_")
    if not re.fullmatch(r"[A-Za-z]+", head) or not (len(head) <= 2 or head.lower() in greek_letters_set):
        return None
    if any(not re.fullmatch(r"[A-Za-z0-9]{1,4}", s) for s in subs):
        return None
    base = f"\\{head}" if head.lower() in greek_letters_set else head
    return f"${base}" + (f"_{{{','.join(subs)}}}" if subs else "") + "$"


def _labels(datasets: Sequence[xr.Dataset]) -> dict[str, str]:
    """Mathtext labels from the papers' systems: each file's own system first, then the symbols
    of the paper's other systems (their observables' formulas are theirs: words only; none when
    the paper is unknown or its systems cannot be built)."""
    from .papers import PAPERS

    out: dict[str, str] = {}
    for ds in datasets:
        row = PAPERS.get(ds.attrs.get("paper"))
        if row is None:
            continue
        try:
            systems = list(row.slot("systems")(row.Config()))
        except Exception:  # noqa: BLE001 - labels only: fall back to words
            continue
        own = str(ds.attrs.get("system", ""))
        for system in sorted(systems, key=lambda s: s.name != own):
            for k, v in style.symbol_labels(system).items():
                out.setdefault(k, v if system.name == own or k not in system.observables else style.words(k))
    return out


def _label(name: str, labels: dict[str, str]) -> str:
    """The y-label: the derivation's (or the name's) symbol, with a word where it is a symbol alone."""
    label = labels.get(name) or _symbol(name)
    return style.quantity_label(name, {name: label} if label else None)


def _kind(ds: xr.Dataset) -> str:
    return {"ode": "ODE", "sde": "SDE", "train": "trained"}.get(ds.attrs.get("source", ""), "trajectory")


def _describe(ds: xr.Dataset) -> str:
    """The legend's name of a file: paper, kind and system (``scb SDE (minibatch sgd reduced)``)."""
    system = style.words(str(ds.attrs.get("system", "")))
    return " ".join(x for x in (ds.attrs.get("paper"), _kind(ds), f"({system})" if system else "") if x)


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
    papers = [ds.attrs.get("paper") for ds in datasets]
    if len(set(papers)) > 1:
        raise ConfigError("vs", f"the files are of different papers ({', '.join(map(str, dict.fromkeys(papers)))}), "
                                "whose time units differ; overlay files of one paper")
    names = list(observables) if observables else [n for n in headline_observables(main, len(observables_of(main)))
                                                    if all(n in ds.data_vars for ds in others)][:MAX_PANELS]
    missing = [n for n in names if any(n not in ds.data_vars for ds in datasets)]
    if missing:
        raise ConfigError("observables", f"not in every trajectory: {', '.join(missing)}; "
                                         f"common: {', '.join(_common(datasets)) or 'none'}")
    if not names:
        raise ConfigError("vs", f"the trajectories share no observable (first has {', '.join(observables_of(main))})")
    labels = _labels(datasets)
    fig, axes = style.panels(len(names))
    order = sorted(range(len(datasets)), key=lambda i: datasets[i].attrs.get("source") == "ode")  # theory on top
    unit = time_unit(main)
    for ax, name in zip(axes, names):
        for k in order:
            _draw(ax, datasets[k], name, k)
        ax.set_ylabel(_label(name, labels))
        ax.set_xlabel(style.axis_label("time", unit, symbol="$t$"))
    fig.suptitle(f"{papers[0]}: {style.words(str(main.attrs.get('system', '')))} "
                 f"({' vs '.join(dict.fromkeys(_kind(ds) for ds in datasets))})")
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
