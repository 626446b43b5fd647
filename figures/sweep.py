"""``tdyn sweep`` and its Python API: grids of a paper's training runs (or ODE solves) through the
sweep runner (:mod:`empirical.sweeps`: result store keyed by config + code version, resume,
failed cells recorded, local processes or Ray).

>>> from figures.sweep import sweep
>>> ds = sweep("scb", {"eta_V": [0.02, 0.05]}, seeds=2, store="runs/scb-lr", overrides=["steps=200"])
>>> ds = sweep("joma", {"lr": [1e-4, 1e-3]}, job="text", store="runs/joma-lr")  # real text (Fig. 8 run)

``job`` (what every cell runs: :data:`JOBS`) is the CLI's ``tdyn sweep --kind``; a ``ConfigError``
about it names the field ``kind``, the flag the user set.

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

__all__ = ["sweep", "plan", "train_cell", "ode_cell", "parse_grid", "text_base", "JOBS"]

#: what a cell of ``tdyn sweep --kind JOB`` runs: job -> the cell function (``"module:function"``)
JOBS = {"train": "figures.sweep:train_cell", "ode": "figures.sweep:ode_cell", "text": "empirical.textrun:text_cell"}


def train_cell(paper: str, config: dict, *, variant: str | None = None, device: str = "cpu"):
    """One training run of ``paper`` with ``config`` (a dict of every field): the row's train slot."""
    row = get(paper)
    cfg = row.Config.from_dict(config)
    return row.slot("train")(cfg, device=device, variant=row.train_variant(cfg, variant), progress=False)


def ode_cell(paper: str, config: dict, *, backend: str = "numba"):
    """One ODE solve of the row's ``problem`` for ``config``."""
    import simulate
    from simulate.trajectory import config_attrs

    row = get(paper)
    cfg = row.Config.from_dict(config)
    traj = simulate.solve(row.slot("problem")(cfg), backend=backend)
    traj.attrs.update(config_attrs(cfg))
    return traj


def parse_grid(row, specs: Sequence[str], base=None) -> dict[str, list[Any]]:
    """``["key=v1,v2,...", ...]`` -> ``{key: [typed values]}`` (each value typed as ``--set`` does
    on ``base``, default the row's Config)."""
    base = row.Config() if base is None else base
    grid: dict[str, list[Any]] = {}
    raws: dict[str, str] = {}
    for spec in specs:
        if "=" not in spec:
            raise ConfigError("grid", f"expected key=v1,v2,..., got {spec!r}")
        key, raw = (s.strip() for s in spec.split("=", 1))
        if key in grid:  # never drop one of two grids silently
            raise ConfigError(key, f"--grid given twice ({key}={raws[key]} and {key}={raw}); "
                                   f"list every value once: --grid {key}={raws[key]},{raw}")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise ConfigError(key, "the grid gives no values")
        grid[key] = _distinct(key, [getattr(base.with_overrides([f"{key}={v}"]), key) for v in values])
        raws[key] = raw
    return grid


def _distinct(key: str, values: list[Any]) -> list[Any]:
    """``values`` unless one repeats (a cell would silently run once for two grid points)."""
    import json

    from simulate.trajectory import jsonable

    seen: set[str] = set()
    for v in values:
        doc = json.dumps(jsonable(v), sort_keys=True)
        if doc in seen:
            raise ConfigError(key, f"the grid lists {v!r} twice")
        seen.add(doc)
    return values


def text_base(paper: str, overrides: Sequence[str] = (), corpus: str | Path | None = None):
    """``job="text"``: the real-text run ``paper`` sweeps (:meth:`sweep_run` of its quick
    protocol: JoMA Fig. 8, Scan & Snap Fig. 10, the topic run) on ``corpus`` (None: the default),
    with ``overrides`` (``--set``) applied; a :class:`~empirical.textrun.TextRunConfig`."""
    from .realtext import config_for, text_papers

    if paper not in text_papers():
        raise ConfigError("kind", f"text: {paper} has no real-text runs (only {', '.join(text_papers())})")
    return config_for(paper, True, corpus).sweep_run().with_overrides(list(overrides))


def plan(paper: str, grid: Mapping[str, Sequence[Any]] | Sequence[str], *, seeds: int = 0, overrides: Sequence[str] = (),
         job: str = "train", variant: str | None = None, device: str = "cpu", backend: str = "numba",
         allow_large: bool = False, corpus: str | Path | None = None) -> list[Cell]:
    """The validated cells of a sweep (nothing runs): every cell's config is built and checked.
    ``job="text"`` sweeps the paper's real-text run (:func:`text_base`, on ``corpus``) instead of its Config."""
    check_choice("kind", job, tuple(JOBS))
    row = get(paper)
    row.check_variant(variant)
    if seeds < 0:
        raise ConfigError("seeds", f"must be >= 0, got {seeds}")
    if corpus is not None and job != "text":
        raise ConfigError("corpus", f"only the real-text runs read a corpus (--kind text), not --kind {job}")
    base = text_base(row.name, overrides, corpus) if job == "text" else row.make_config(overrides, variant=variant)
    if not isinstance(grid, Mapping):
        grid = parse_grid(row, grid, base)
    else:
        grid = {k: _distinct(k, list(v)) for k, v in grid.items()}
    for item in overrides:  # --set of a swept field would be ignored: refuse it
        key = item.split("=", 1)[0].strip()
        if key in grid:
            raise ConfigError(key, f"both swept (--grid {key}=...) and fixed (--set {item.strip()}); give one")
    if seeds and "seed" in grid:
        raise ConfigError("seed", "both swept (--grid seed=...) and repeated (--seeds); give one")
    if seeds and not hasattr(base, "seed"):
        raise ConfigError("seeds", f"{paper}'s config has no seed field")
    train = {"device": device} if row.config_has_variant else {"variant": variant, "device": device}
    options = {"train": train, "ode": {"backend": backend}, "text": {"device": device}}[job]
    if job == "text":
        from empirical.textrun import cell_config

        base_dict = cell_config(base)
    else:
        base_dict = base.to_dict()
    cells = grid_cells(row.name, base_dict, grid, seeds=seeds, job=job, options=options)
    for c in cells:  # the validation pass: every cell, before any runs
        cfg = type(base).from_dict(c.config, field="grid")
        if job != "text":
            check(row.name, cfg, "train" if job == "train" else "simulate", allow_large=allow_large,
                  estimator=row.slot("estimate") if row.estimate is not None else None)
    return cells


def sweep(paper: str, grid: Mapping[str, Sequence[Any]] | Sequence[str], *, store: str | Path, seeds: int = 0,
          overrides: Sequence[str] = (), job: str = "train", variant: str | None = None, device: str = "cpu",
          backend: str = "numba", workers: int = 1, ray: str | None = None, allow_large: bool = False,
          corpus: str | Path | None = None, progress=None, bar=None):
    """Run a grid (skipping cells already in ``store``) and return it as one Dataset (dim ``cell``).
    Failed cells are listed in ``store/index.csv`` with their error; rerun to retry them.
    ``progress``/``bar``: as :func:`empirical.sweeps.run_cells`'s."""
    cells = plan(paper, grid, seeds=seeds, overrides=overrides, job=job, variant=variant, device=device, backend=backend,
                 allow_large=allow_large, corpus=corpus)
    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    run_cells(JOBS[job], cells, store, workers=workers, ray=ray, progress=progress, bar=bar)
    return open_sweep(store)
