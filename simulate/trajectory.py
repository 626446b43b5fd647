"""Trajectories: xarray Datasets with a fixed layout, and atomic NetCDF I/O.

Layout (shared by ODE solves, SDE ensembles and real training runs, so that figures can overlay
any two): dimension ``time`` (plus ``path`` for SDE ensembles, ``run`` for stacked training runs);
one data variable per state and per observable; attributes ``paper``, ``system``, ``source``
(``ode``/``sde``/``train``), ``backend``, ``parameters`` (JSON), ``seed``, ``versions`` (JSON),
``git_commit``, ``status`` and ``message`` (as scipy's solve_ivp).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from theory.errors import ConfigError

__all__ = ["make_trajectory", "save", "load", "versions", "git_commit", "atomic_write"]

Trajectory = xr.Dataset


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("tdyn", "numpy", "scipy", "sympy", "jax", "diffrax", "torch", "xarray"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


@lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
        ).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001 - metadata only
        return "unknown"


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def make_trajectory(
    time: np.ndarray,
    variables: Mapping[str, Any],
    *,
    paper: str,
    system: str,
    source: str,
    backend: str = "",
    parameters: Mapping[str, Any] | None = None,
    seed: int | None = None,
    status: int = 0,
    message: str = "",
    extra_attrs: Mapping[str, Any] | None = None,
    lead_dims: tuple[str, ...] = (),
) -> xr.Dataset:
    """Build a trajectory Dataset. ``variables`` maps name -> array with leading dims
    ``lead_dims + ("time",)`` or name -> (extra_dims, array) for array-valued states."""
    data_vars = {}
    for name, val in variables.items():
        if isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], tuple):
            dims, arr = val
            data_vars[name] = (lead_dims + ("time",) + tuple(dims), np.asarray(arr))
        else:
            data_vars[name] = (lead_dims + ("time",), np.asarray(val, dtype=np.float64))
    attrs = {
        "paper": paper,
        "system": system,
        "source": source,
        "backend": backend,
        "parameters": json.dumps(_jsonable(dict(parameters or {})), sort_keys=True),
        "seed": -1 if seed is None else int(seed),
        "versions": json.dumps(versions(), sort_keys=True),
        "git_commit": git_commit(),
        "status": int(status),
        "message": message,
    }
    for k, v in (extra_attrs or {}).items():
        attrs[k] = v if isinstance(v, (str, int, float)) else json.dumps(_jsonable(v))
    return xr.Dataset(data_vars, coords={"time": np.asarray(time, dtype=np.float64)}, attrs=attrs)


def parameters_of(ds: xr.Dataset) -> dict[str, Any]:
    return json.loads(ds.attrs.get("parameters", "{}"))


def atomic_write(path: str | os.PathLike, write_fn) -> Path:
    """Call ``write_fn(tmp_path)`` then rename onto ``path``: readers never see a partial file."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise ConfigError("out", f"directory does not exist: {parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    try:
        write_fn(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write NetCDF (h5netcdf engine) atomically."""
    return atomic_write(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"))


def load(path: str | os.PathLike) -> xr.Dataset:
    return xr.load_dataset(path, engine="h5netcdf")
