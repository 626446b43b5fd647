"""Scan & Snap Fig. 6 (docs/papers/scan_snap.md §5.4) through the sweep runner (:mod:`empirical.sweeps`).

The protocol is 4 panels (#last) x 4 eta_Z x 4 ratios eta_Y/eta_Z x 10 seeds, 100 SGD steps
(momentum 0.9, batch 128, T = 128, default init). One sweep **cell** is one (panel, eta_Z) row:
its 4 ratios x ``seeds`` runs train as one vectorised call of the count-vector engine
(:class:`empirical.scan_snap.fast.CountSGD`, the same stochastic algorithm as the torch grid),
and the cell returns an ``xarray.Dataset`` (dims ``ratio``, ``seed``) of the final observables.
Cells live in a store (a folder): finished cells are skipped on rerun, an interrupted grid
resumes, cells run in local processes or on Ray (``workers``, ``ray``); without a store the grid
runs in a temporary one.

Every cell has its own seed (``1000 * num_last + index of eta_Z``): cells are independent, as the
runs of the torch grid are. Float64; ``float32=True`` (quick mode) runs the engine in float32.
``engine="torch"`` runs a cell on the torch grid (:func:`empirical.scan_snap.experiment.train_grid`),
e.g. on a GPU. :func:`fig6_panel` is one panel, cached: the figure and the claim share it.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from empirical.sweeps import CellsFailed
from theory import scan_snap as ss

__all__ = ["FIG6_GRID", "fig6_config", "fig6_cells", "fig6_cell", "fig6_table", "fig6_panel", "CELL_FN", "CellsFailed"]

#: Fig. 6 protocol (spec §5.4): eta_Z values, eta_Y/eta_Z ratios, #last panels.
FIG6_GRID = {"eta_Z": (0.5, 1.0, 2.0, 3.0), "ratio": (1.0, 2.0, 5.0, 10.0), "num_last": (1, 3, 5, 10)}
#: The cell function, as the sweep runner imports it in every worker.
CELL_FN = "figures.scan_snap.fig6:fig6_cell"


def fig6_config(num_last: int, eta_Z: float, *, zero_init: bool = False, steps: int = 100) -> ss.ScanSnapConfig:
    """The official sweep's setting (spec §5.4) for one (panel, eta_Z) cell; eta_Y is set per run
    (ratio x eta_Z) inside the cell."""
    i = FIG6_GRID["eta_Z"].index(eta_Z) if eta_Z in FIG6_GRID["eta_Z"] else int(round(eta_Z * 100))
    return ss.Config.preset("fig6", num_last=num_last, eta_Z=eta_Z, eta_Y=eta_Z, seed=1000 * num_last + i,
                            zero_init=zero_init, steps=steps, log_every=steps)


def fig6_cell(paper: str, config: dict, *, ratios, seeds: int, float32: bool = False, engine: str = "numpy",
              device: str = "cpu"):
    """One (panel, eta_Z) row: ``len(ratios) x seeds`` runs of ``config`` (eta_Y = ratio x eta_Z) in
    one vectorised call. Returns a Dataset with dims (ratio, seed): the final spec §6 observables."""
    import torch
    import xarray as xr

    from empirical.scan_snap.experiment import train_grid

    cfg = ss.Config.from_dict(config)
    ratios = [float(r) for r in ratios]
    res = train_grid(cfg, [cfg.eta_Z], ratios, seeds, device=device, engine=engine,
                     dtype=torch.float32 if float32 else torch.float64)
    shape = (len(ratios), seeds)  # runs are ordered (eta_Z, ratio, seed)
    data = {k: (("ratio", "seed"), np.asarray(v, np.float64).reshape(shape)) for k, v in res["final"].items()}
    ds = xr.Dataset(data, coords={"ratio": ratios, "seed": np.arange(seeds)})
    ds.attrs.update({"paper": paper, "num_last": cfg.num_last, "eta_Z": cfg.eta_Z, "engine": engine,
                     "dtype": "float32" if float32 else "float64", "steps": cfg.steps, "config_seed": cfg.seed})
    return ds


def fig6_cells(panels, seeds: int, *, float32: bool = False, zero_init: bool = False, engine: str = "numpy",
               device: str = "cpu", steps: int = 100, eta_Z=None, ratios=None):
    """The sweep cells of Fig. 6: one per (panel, eta_Z)."""
    from empirical.sweeps import Cell

    ratios = list(ratios or FIG6_GRID["ratio"])
    cells = []
    for nl in panels:
        for ez in eta_Z or FIG6_GRID["eta_Z"]:
            cfg = fig6_config(nl, ez, zero_init=zero_init, steps=steps)
            cells.append(Cell(ss.PAPER, cfg.to_dict(), "fig6",
                              {"ratios": ratios, "seeds": seeds, "float32": float32, "engine": engine,
                               "device": device}, {"num_last": nl, "eta_Z": ez}))
    return cells


def fig6_table(panels=FIG6_GRID["num_last"], seeds: int = 10, *, float32: bool = False, zero_init: bool = False,
               engine: str = "numpy", device: str = "cpu", store=None, workers: int = 1, ray: str | None = None,
               steps: int = 100, eta_Z=None, ratios=None, progress=None, cell_fn: str = CELL_FN,
               bar=None) -> pd.DataFrame:
    """Run the Fig. 6 grid through the sweep runner and return the table (num_last, eta_Z, ratio,
    mean, std, count) of the final DT entropy (std over seeds, ddof 1, as pandas). ``store``: the
    result folder (resumable; None: a temporary one); ``progress(key, status, error)`` is called for
    each cell computed, ``bar`` draws the cells' bar (:func:`figures.progress.cell_bar`); ``cell_fn``
    ("module:function") replaces :func:`fig6_cell` (tests)."""
    from empirical.sweeps import run_cells

    cells = fig6_cells(panels, seeds, float32=float32, zero_init=zero_init, engine=engine, device=device,
                       steps=steps, eta_Z=eta_Z, ratios=ratios)
    with tempfile.TemporaryDirectory(prefix="tdyn-fig6-") as tmp:
        root = Path(store) if store is not None else Path(tmp)
        index = run_cells(cell_fn, cells, root, workers=workers, ray=ray, progress=progress, bar=bar)
        if (index["status"] != "ok").any():
            raise CellsFailed(root, index)
        return _table(root, index)


@lru_cache(maxsize=16)
def fig6_panel(num_last: int, seeds: int, device: str, float32: bool, zero_init: bool = False):
    """One Fig. 6 panel (spec §5.4): DT entropy at iteration 100 for every (eta_Z, ratio) of
    :data:`FIG6_GRID`, ``seeds`` runs each, SGD momentum 0.9, batch 128, T = 128, default init
    (official sweep), through the sweep runner (:func:`fig6_table`: the count-vector engine on CPU,
    the torch grid on a GPU). Returns a DataFrame (num_last, eta_Z, ratio, mean, std, count).
    Cached: the figure and the claim share it."""
    from empirical.trainer import resolve_device

    dev = resolve_device(device)
    return fig6_table((num_last,), seeds, float32=float32, zero_init=zero_init,
                      engine="numpy" if dev.type == "cpu" else "torch", device=str(dev))


def _table(root: Path, index: pd.DataFrame) -> pd.DataFrame:
    import xarray as xr

    rows = []
    for _, r in index.iterrows():
        ds = xr.load_dataset(root / r["file"], engine="h5netcdf")
        ent = ds["dt_entropy"].values  # (ratio, seed)
        for i, ratio in enumerate(ds["ratio"].values):
            e = ent[i]
            rows.append({"num_last": int(ds.attrs["num_last"]), "eta_Z": float(ds.attrs["eta_Z"]),
                         "ratio": float(ratio), "mean": float(e.mean()),
                         "std": float(e.std(ddof=1)) if e.size > 1 else float("nan"), "count": int(e.size)})
    return pd.DataFrame(rows).sort_values(["num_last", "eta_Z", "ratio"]).reset_index(drop=True)
