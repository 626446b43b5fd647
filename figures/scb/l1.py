"""SCB main figure, for real: the l1-proximal preconditioned method vs vanilla SGD (docs/papers/scb.md §6 item 1,
§6.1), drawn from the ``l1_beats_sgd`` claim's runs (:func:`figures.scb.claims.l1_sgd_runs`: the
same cached computation the claim's map cells use, so ``tdyn figures scb`` trains them once).

Protocol (the claim's, ``figures/scb/claims.toml``): N=3, Q=2, Dirichlet(1) transition
(``task_seed`` 0, not chosen by outcome); the l1 method (preconditioned, prox on once
T<a,q> >= 2, end-only normalisation) and vanilla SGD on the same minibatches, each on a grid of
{1/4, 1/2, 3/4} x its own stability bound with the rate chosen per seed by the early-stopped
population (validation) loss; distances after the final normalisation (spec §3.5, §4).

The figure: distance to the ground truth (row 1: P, row 2: the attention Q) vs samples at the
map's largest T, one column per batch (at most three: the smallest, a middle and the largest); the
median over seeds of SGD and of the l1 method at each lambda of the map (the whole 4-horizon run). The claim's own map figure and table (where it
holds, where it breaks) are written by ``figures.claims.report``; this module also writes the
early-stopped numbers per (T, batch, lambda, seed) as ``l1_vs_sgd.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..core import finish_figure, save_table
from ..style import axis_label, legend_outside, role
from . import claims as C

__all__ = ["fig_l1_vs_sgd", "l1_table", "CLAIM"]

#: the claim whose runs the figure draws
CLAIM = "l1_beats_sgd"
_DIST = {"P": "value_relative_distance_to_truth", "Q": "attention_distance_to_truth"}


def _chosen(ds, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the distance curves (seeds, time) for P and Q of the method's rate (the rate whose
    early-stopped population loss is lowest, when a grid is run)."""
    loss = ds[f"{prefix}population_loss"].transpose(f"{prefix}lr", "seed", "time").values
    best = np.argmin(np.where(np.isfinite(loss), loss, np.inf).min(-1), axis=0)  # (seed,)
    out = []
    for name in _DIST.values():
        v = ds[f"{prefix}{name}"].transpose(f"{prefix}lr", "seed", "time").values
        out.append(v[best, np.arange(v.shape[1])])
    return out[0], out[1]


def l1_table(quick: bool = True, *, device: str = "cpu") -> pd.DataFrame:
    """Early-stopped numbers of the claim's runs: one row per (T, batch, lambda, method, seed) with
    the rate, ``dist_P``, ``dist_Q``, ``support_exact`` at the claim's early stop (one horizon) and
    the claim's statistic."""
    rows = []
    for coords, cfg, ds in C.map_runs(CLAIM, quick=quick, device=device):
        for i, seed in enumerate(ds["seed"].values):
            one = ds.isel(seed=i)
            stat = C.l1_vs_sgd_log_ratio(one, cfg)
            for method in ("l1", "sgd"):
                e = C.early_stopped(one, f"{method}_", cfg)
                lrs = one[f"{method}_lr"].values
                rows.append({**coords, "method": method, "seed": int(seed),
                             "lr": float(lrs[int(e["lr_index"])]) if np.isfinite(e["lr_index"]) else np.nan,
                             "dist_P": e[_DIST["P"]], "dist_Q": e[_DIST["Q"]], "support_exact": e["support_exact"],
                             "log_distance_ratio": stat})
    return pd.DataFrame(rows)


def _tex_number(x: float) -> str:
    """``x`` to two digits as mathtext: ``9 \\times 10^{-5}`` below 0.001 (not ``9e-05``)."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{float(mantissa):g} \\times 10^{{{int(exponent)}}}" if x and abs(x) < 1e-3 else f"{x:.2g}"


def fig_l1_vs_sgd(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> dict[str, Any]:
    """Distance to the ground truth vs samples, l1 (each lambda) vs vanilla SGD, at the map's
    largest T (module docstring); also ``l1_vs_sgd.csv`` (:func:`l1_table`)."""
    from empirical.trainer import resolve_device

    dev = resolve_device(device).type
    runs = C.map_runs(CLAIM, quick=quick, device=dev)
    T = max(c["T"] for c, _, _ in runs)
    batches = sorted({c["batch"] for c, _, _ in runs if c["T"] == T})
    if len(batches) > 3:  # at most 3 panels in a row: the smallest, a middle and the largest batch
        batches = [batches[0], batches[len(batches) // 2], batches[-1]]
    # rows: P, then Q; one column per batch (style.panels would wrap 2 x batches panels by 3)
    fig, grid = plt.subplots(2, len(batches), figsize=(3.4 * len(batches), 2.6 * 2), squeeze=False,
                             layout="constrained")
    lams = sorted({c["lam"] for c, _, _ in runs})
    colours = dict(zip(lams, ["#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00", "#F0E442"]))
    curves = {}
    for col, B in enumerate(batches):
        cells = [(c, cfg, ds) for c, cfg, ds in runs if c["T"] == T and c["batch"] == B]
        for row, which in enumerate(("P", "Q")):
            ax = grid[row, col]
            first = cells[0][2]
            samples = first["time"].values * B  # time = optimiser step (SCBConfig.ode_time)
            sgd = _chosen(first, "sgd_")[row]
            ax.plot(samples, np.median(sgd, 0), label="vanilla SGD (median over seeds)", **role("theory"))
            for c, cfg, ds in cells:
                y = _chosen(ds, "l1_")[row]
                curves[(T, B, c["lam"], which)] = y
                ax.plot(samples, np.median(y, 0), color=colours[c["lam"]], lw=1.2,
                        label=rf"$\ell_1$ proximal, $\lambda = {_tex_number(c['lam'])}$")
            curves[(T, B, "sgd", which)] = sgd
            ax.set_yscale("log")
            ax.set_xlabel(axis_label("samples", None))
            ax.set_ylabel(axis_label(f"distance to {which}", None, r"$d_P$" if which == "P" else r"$d_Q$"))
            ax.set_title(f"T = {T}, batch {B}: distance to {which}", fontsize=9)
    legend_outside(fig)
    png = finish_figure(fig, outdir, "l1_vs_sgd.png")
    table = l1_table(quick, device=dev)
    save_table(table, outdir, "l1_vs_sgd.csv")
    return {"table": table, "curves": curves, "png": png}
