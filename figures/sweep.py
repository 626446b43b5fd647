"""``tdyn sweep`` and its Python API: grids of a paper's training runs (or ODE solves) through the
sweep runner (:mod:`empirical.sweeps`: result store keyed by config + code version, resume,
failed cells recorded, local processes or Ray).

>>> from figures.sweep import sweep
>>> ds = sweep("scb", {"eta_V": [0.02, 0.05]}, seeds=2, store="runs/scb-lr", overrides=["steps=200"])

Every cell's config is validated and its resource estimate checked (``theory.limits``) before any
cell runs: a bad grid value is a ``ConfigError`` naming its field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from empirical.sweeps import Cell, grid_cells, open_sweep, run_cells
from theory.errors import ConfigError, check_choice
from theory.limits import check

from .papers import get

__all__ = ["sweep", "plan", "train_cell", "ode_cell", "parse_grid", "KINDS"]

KINDS = {"train": "figures.sweep:train_cell", "ode": "figures.sweep:ode_cell"}


def train_cell(paper: str, config: dict, *, variant: str | None = None, device: str = "cpu"):
    """One training run of ``paper`` with ``config`` (a dict of every field): the row's train slot."""
    row = get(paper)
    return row.slot("train")(row.Config.from_dict(config), device=device, variant=variant, progress=False)


def ode_cell(paper: str, config: dict, *, backend: str = "diffrax"):
    """One ODE solve of the row's ``problem`` for ``config``."""
    import simulate
    from simulate.trajectory import config_attrs

    row = get(paper)
    cfg = row.Config.from_dict(config)
    traj = simulate.solve(row.slot("problem")(cfg), backend=backend)
    traj.attrs.update(config_attrs(cfg))
    return traj


def parse_grid(row, specs: Sequence[str]) -> dict[str, list[Any]]:
    """``["key=v1,v2,...", ...]`` -> ``{key: [typed values]}`` (each value typed as ``--set`` does)."""
    base = row.Config()
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        if "=" not in spec:
            raise ConfigError("grid", f"expected key=v1,v2,..., got {spec!r}")
        key, raw = (s.strip() for s in spec.split("=", 1))
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise ConfigError(key, "the grid gives no values")
        grid[key] = [getattr(base.with_overrides([f"{key}={v}"]), key) for v in values]
    return grid


def plan(paper: str, grid: Mapping[str, Sequence[Any]] | Sequence[str], *, seeds: int = 0, overrides: Sequence[str] = (),
         kind: str = "train", variant: str | None = None, device: str = "cpu", backend: str = "diffrax",
         allow_large: bool = False) -> list[Cell]:
    """The validated cells of a sweep (nothing runs): every cell's config is built and checked."""
    check_choice("kind", kind, tuple(KINDS))
    row = get(paper)
    row.check_variant(variant)
    if not isinstance(grid, Mapping):
        grid = parse_grid(row, grid)
    if seeds < 0:
        raise ConfigError("seeds", f"must be >= 0, got {seeds}")
    base = row.Config().with_overrides(list(overrides))
    if seeds and not hasattr(base, "seed"):
        raise ConfigError("seeds", f"{paper}'s config has no seed field")
    options = {"variant": variant, "device": device} if kind == "train" else {"backend": backend}
    cells = grid_cells(row.name, base.to_dict(), grid, seeds=seeds, kind=kind, options=options)
    for c in cells:  # the validation pass: every cell, before any runs
        cfg = row.Config.from_dict(c.config, field="grid")
        check(row.name, cfg, "train" if kind == "train" else "simulate", allow_large=allow_large)
    return cells


def sweep(paper: str, grid: Mapping[str, Sequence[Any]] | Sequence[str], *, store: str | Path, seeds: int = 0,
          overrides: Sequence[str] = (), kind: str = "train", variant: str | None = None, device: str = "cpu",
          backend: str = "diffrax", workers: int = 1, ray: str | None = None, allow_large: bool = False,
          progress=None):
    """Run a grid (skipping cells already in ``store``) and return it as one Dataset (dim ``cell``).
    Failed cells are listed in ``store/index.csv`` with their error; rerun to retry them."""
    cells = plan(paper, grid, seeds=seeds, overrides=overrides, kind=kind, variant=variant, device=device, backend=backend,
                 allow_large=allow_large)
    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    run_cells(KINDS[kind], cells, store, workers=workers, ray=ray, progress=progress)
    return open_sweep(store)
