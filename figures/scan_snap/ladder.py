"""Scan & Snap's realism ladder beside the T = inf ODE (docs/papers/scan_snap.md §3.7, §6).

* :func:`ladder_config` — the ladder's setting: the Syn-Medium 1/2 layout (both classes share one
  query token, so the label is in the context only: a standard transformer's residual stream
  cannot read it off the query token and bypass the attention, as it could on Syn-Small), zero
  init where a rung has it, plain SGD (t = step), eta_Y = eta_Z = 1, batch 128, T = 128 (the
  official sequence length), 100 (full 300) steps;
* :func:`ode_observables` — the exact T = inf flow (spec §2.5) from zero init, read by the rungs'
  own read-out (:func:`empirical.scan_snap.ladder.attention_observables` on the flow's ``Z``);
* :func:`ladder_summary` — per rung: rel L2 of the seed-mean headline observable (``dt_entropy``) and
  of its drop ``h(0) - h(t)`` against the ODE, the CPU seconds, and per seed whether the paper's
  headline holds (the DT entropy and the common-token mass fall; how much of the fall comes in the
  second half: a snap leaves little);
* :func:`ladder_figure` — the headline observables over time at each rung beside the ODE, one style.

Not registered among the paper's figures; :func:`ladder_data` runs everything once.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from empirical.scan_snap.ladder import OBSERVABLES, RungSettings, attention_observables, train_ladder
from theory import scan_snap as ss

from .. import style
from ..core import finish_figure, rel_l2

__all__ = ["ladder_config", "ode_observables", "ladder_summary", "ladder_figure", "ladder_data", "HEADLINE",
           "RUNG_LABELS"]

#: the headline observable (the Fig. 6 metric)
HEADLINE = "dt_entropy"
#: what each rung is, for legends and tables
RUNG_LABELS = {0: "rung 0: reduced (Y, Z)", 1: "rung 1: paper's 1-layer transformer",
               2: "rung 2: standard transformer (AdamW)"}
_LABELS = {"dt_entropy": "DT attention entropy", "ct_mass": "common-token attention mass",
           "dt_entropy_sampled": "DT entropy (sampled attention)", "support_entropy": "support attention entropy",
           "loss": "training loss"}
_MARKERS = {0: ("o", "--"), 1: ("s", "-."), 2: ("^", ":")}


def ladder_config(quick: bool = True) -> ss.ScanSnapConfig:
    """The ladder's setting (module docstring), logged every 5 steps."""
    return ss.Config.preset("theory", quick).replace(num_last=1, num_next_per_last=2, T=128, batch=128,
                                                     steps=100 if quick else 300, log_every=5)


def ode_observables(config: ss.ScanSnapConfig, times: np.ndarray) -> xr.Dataset:
    """The exact T = inf flow at per-sample ``times``, with the rungs' attention read-outs."""
    from .lines import theory_trajectory

    th = theory_trajectory(config.replace(zero_init=True), times)
    task = ss.make_task(config)
    y = np.stack([th[n].values for n in ss.full_system(config).state_names], -1)
    _, Z = ss.embed_symmetric_state(task, y)
    obs = attention_observables(task, ss.attention_scores(task, Z))
    return xr.Dataset({k: ("time", v) for k, v in obs.items()}, coords={"time": th["time"].values})


def _drop_halves(h: np.ndarray) -> tuple[float, float]:
    """(total fall h(0) - h(end), fraction of it over the second half of the steps)."""
    mid = h[(len(h) - 1) // 2]
    total = h[0] - h[-1]
    return float(total), float((mid - h[-1]) / total) if total != 0 else float("nan")


def ladder_summary(ds: xr.Dataset, ode: xr.Dataset) -> list[dict]:
    """One row per rung (see the module docstring); the ODE is compared on the runs' ODE times."""
    rows = []
    th = ode[HEADLINE].values
    for r in ds["rung"].values:
        d = ds.sel(rung=r).dropna("seed", how="all", subset=[HEADLINE])  # rungs may run different seeds
        mean = d[HEADLINE].mean("seed").values
        falls = [_drop_halves(d[HEADLINE].sel(seed=s).values) for s in d["seed"].values]
        ct = [float(d["ct_mass"].sel(seed=s).values[0] - d["ct_mass"].sel(seed=s).values[-1]) for s in d["seed"].values]
        rows.append({
            "rung": int(r), "what": RUNG_LABELS[int(r)],
            "rel_l2_dt_entropy": rel_l2(mean, th),
            "rel_l2_dt_entropy_drop": rel_l2(th[0] - mean, th[0] - th),
            "cpu_seconds": float(d["cpu_seconds"]),
            "seeds": int(d.sizes["seed"]),
            "dt_entropy_start_end": (float(mean[0]), float(mean[-1])),
            "ode_dt_entropy_start_end": (float(th[0]), float(th[-1])),
            "dt_entropy_fall_per_seed": [f for f, _ in falls],
            "late_fraction_of_fall_per_seed": [x for _, x in falls],
            "ct_mass_fall_per_seed": ct,
            "headline_holds_seeds": sum(f > 0 and c > 0 for (f, _), c in zip(falls, ct)),
        })
    return rows


def ladder_figure(ds: xr.Dataset, ode: xr.Dataset, outdir=None, *, name: str = "ladder",
                  observables=("dt_entropy", "ct_mass")):
    """The observables over the optimiser step at each rung (seed mean, with the seeds' range
    shaded) beside the T = inf ODE (plain SGD: per-sample time = step). Saved as ``outdir/name``
    when ``outdir`` is given; returns the figure's path or None."""
    fig, axes = style.panels(len(observables))
    t = ds["time"].values
    for ax, obs in zip(axes, observables):
        for r in ds["rung"].values:
            da = ds[obs].sel(rung=r).dropna("seed", how="all")
            marker, ls = _MARKERS[int(r)]
            line, = ax.plot(t, da.mean("seed"), marker=marker, linestyle=ls, markersize=3, linewidth=1.0,
                            markevery=max(1, t.size // 12), label=f"{RUNG_LABELS[int(r)]} ({da.sizes['seed']} seeds)")
            ax.fill_between(t, da.min("seed"), da.max("seed"), color=line.get_color(), alpha=0.15, linewidth=0)
        ax.plot(ode["time"], ode[obs], **style.role("theory"), label="ODE (T = inf flow)")
        ax.set_xlabel(style.axis_label("optimiser step", None))
        ax.set_ylabel(_LABELS[obs])
    style.legend_outside(fig, axes)
    return finish_figure(fig, outdir, name)


def ladder_data(quick: bool = True, *, seeds=None, rung2_seeds=None, settings: RungSettings | None = None,
                device: str = "cpu"):
    """``(ladder dataset, ODE dataset, summary rows)``: rungs 0 and 1 on ``seeds`` (default 4),
    rung 2 on ``rung2_seeds`` (default the first 2: it trains one seed at a time)."""
    cfg = ladder_config(quick)
    seeds = list(range(4)) if seeds is None else list(seeds)
    rung2_seeds = seeds[:2] if rung2_seeds is None else list(rung2_seeds)
    low = train_ladder(cfg, seeds=seeds, rungs=(0, 1), settings=settings, device=device)
    top = train_ladder(cfg, seeds=rung2_seeds, rungs=(2,), settings=settings, device=device)
    ds = xr.concat([low, top], "rung", join="outer")
    ode = ode_observables(cfg, cfg.ode_times())
    return ds, ode, ladder_summary(ds, ode)


assert set(_LABELS) == set(OBSERVABLES)
