"""Trajectories: xarray Datasets with a fixed layout, and atomic NetCDF I/O.

Layout (shared by ODE solves, SDE ensembles and real training runs, so that figures can overlay
any two): dimension ``time`` (plus ``path`` for SDE ensembles, ``run`` for stacked training runs);
one data variable per state and per observable; attributes ``paper``, ``system``, ``source``
(``ode``/``sde``/``train``), ``backend``, ``parameter_values`` (JSON: the values a solve or run
used, by name — not the system's parameter symbols), ``seed``, ``versions`` (JSON),
``git_commit``, ``code_version`` (hash of tdyn's source), ``status`` and ``message`` (as scipy's
solve_ivp); with a config, ``config`` (JSON of every field, seeds included) and ``config_class``:
enough to re-run it (``tdyn simulate/train --from FILE.nc``).

Writes are atomic (a temporary file renamed onto the target) and honour the umask; an interrupt
(SIGINT, or SIGTERM while a write is in progress) removes the temporary file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from theory.errors import ConfigError
from theory.params import ParamsBase

__all__ = ["make_trajectory", "save", "save_or_rescue", "WriteFailed", "to_bytes", "load", "versions", "git_commit", "code_version", "atomic_write",
           "parameter_values_of", "config_of", "jsonable", "Terminated"]

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
def _versions_json() -> str:
    return json.dumps(versions(), sort_keys=True)


@lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
        ).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001 - metadata only
        return "unknown"


_PACKAGES = ("theory", "simulate", "empirical", "figures")


@lru_cache(maxsize=1)
def code_version() -> str:
    """16 hex digits of a SHA-256 over tdyn's Python source (the four packages, sorted by path):
    changes with any edit, committed or not, and works without git (an installed wheel)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def jsonable(v: Any, *, finite: bool = False) -> Any:
    """``v`` with numpy scalars/arrays, tuples and non-string keys made JSON-able (the one
    converter: configs, provenance, sweep cells, reports). ``finite=True`` also writes NaN/inf
    as ``None`` (strict JSON, for reports); by default they stay floats (``json.dumps`` writes
    ``NaN``), so a config's hash sees them."""
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist(), finite=finite)
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return None if finite and not math.isfinite(v) else v
    if isinstance(v, Mapping):
        return {str(k): jsonable(x, finite=finite) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x, finite=finite) for x in v]
    return v


def make_trajectory(
    time: np.ndarray,
    variables: Mapping[str, Any],
    *,
    paper: str,
    system: str,
    source: str,
    backend: str = "",
    parameter_values: Mapping[str, Any] | None = None,
    seed: int | None = None,
    status: int = 0,
    message: str = "",
    extra_attrs: Mapping[str, Any] | None = None,
    lead_dims: tuple[str, ...] = (),
    config: Any = None,
) -> xr.Dataset:
    """Build a trajectory Dataset. ``variables`` maps name -> array with leading dims
    ``lead_dims + ("time",)`` or name -> (extra_dims, array) for array-valued states.
    ``config`` (a paper Config, or a dict of its fields) is recorded in full (provenance)."""
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
        "parameter_values": json.dumps(jsonable(dict(parameter_values or {})), sort_keys=True),
        "seed": -1 if seed is None else int(seed),
        "versions": _versions_json(),
        "git_commit": git_commit(),
        "code_version": code_version(),
        "status": int(status),
        "message": message,
    }
    if config is not None:
        attrs.update(config_attrs(config))
    for k, v in (extra_attrs or {}).items():
        attrs[k] = v if isinstance(v, (str, int, float)) else json.dumps(jsonable(v))
    return xr.Dataset(data_vars, coords={"time": np.asarray(time, dtype=np.float64)}, attrs=attrs)


def config_attrs(config: Any) -> dict[str, str]:
    """``{"config": JSON of every field, "config_class": "module:Class"}`` for a Config (or dict)."""
    if isinstance(config, Mapping):
        return {"config": json.dumps(jsonable(dict(config)), sort_keys=True)}
    if isinstance(config, ParamsBase):  # a paper Config: written out once (a map's cells share it)
        return dict(_memo_config_attrs(_ByRepr(config)))
    return dict(_config_attr_items(config))


def _config_attr_items(config: Any) -> tuple[tuple[str, str], ...]:
    return (("config", json.dumps(jsonable(config.to_dict()), sort_keys=True)),
            ("config_class", f"{type(config).__module__}:{type(config).__qualname__}"))


class _ByRepr:
    """A paper Config (scalar fields, so its ``repr`` is complete) keyed by its class and ``repr``
    (``lr=1`` and ``lr=1.0`` are equal dataclasses but record different JSON), for the memo of
    :func:`_memo_config_attrs`."""

    __slots__ = ("config", "key")

    def __init__(self, config):
        self.config, self.key = config, (type(config), repr(config))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _ByRepr) and self.key == other.key


@lru_cache(maxsize=64)
def _memo_config_attrs(key: _ByRepr) -> tuple[tuple[str, str], ...]:
    return _config_attr_items(key.config)


def parameter_values_of(ds: xr.Dataset) -> dict[str, Any]:
    """The parameter values recorded in a trajectory (``{}`` for none; files written before the
    attribute was renamed keep them under ``parameters``)."""
    return json.loads(ds.attrs.get("parameter_values", ds.attrs.get("parameters", "{}")))


def config_of(ds: xr.Dataset) -> dict[str, Any]:
    """The full config recorded in a trajectory (``{}`` for a file written without one)."""
    return json.loads(ds.attrs.get("config", "{}"))


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM while :func:`atomic_write` (or the CLI) runs, so that
    ``finally`` blocks clean up as they do on Ctrl-C (``KeyboardInterrupt``)."""


def _raise_terminated(signum, frame):
    raise Terminated(f"terminated by signal {signum}")


@contextmanager
def terminate_as_exception():
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only; elsewhere a no-op).
    A SIGTERM the process was started with ignored (``nohup``, a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def atomic_write(path: str | os.PathLike, write_fn) -> Path:
    """Call ``write_fn(tmp_path)`` then rename onto ``path``: readers never see a partial file.
    The result has mode ``0o666 & ~umask`` (as ``open`` would give); on any exception, Ctrl-C or
    SIGTERM the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise ConfigError("out", f"directory does not exist: {parent}")
    with terminate_as_exception():
        tmp = None
        try:
            # the temporary name stays within the file system's 255 bytes however long ``path``'s is
            stem = os.fsdecode(os.fsencode(path.name)[:200])
            fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=parent)
            os.close(fd)
            write_fn(tmp)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def to_bytes(ds: xr.Dataset) -> bytes:
    """``ds`` as the bytes of a NetCDF file (h5netcdf engine), built in memory: the disk is then
    written by plain file I/O, so a full disk is an ``OSError`` and never an HDF5 library state."""
    return bytes(ds.to_netcdf(engine="h5netcdf"))


def save(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write NetCDF (h5netcdf engine) atomically (serialised in memory first, :func:`to_bytes`)."""
    data = to_bytes(ds)
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def _why(err: OSError) -> str:
    """The reason of an ``OSError`` in a few words (h5py's messages carry ``errno = N``)."""
    import re

    code = err.errno
    if code is None:
        m = re.search(r"errno = (\d+)", str(err))
        code = int(m.group(1)) if m else None
    return os.strerror(code) if code else " ".join(str(err).split())[:120]


class WriteFailed(ConfigError):
    """``--out`` could not be written (a full disk, a quota, ...). ``rescued`` is where the result
    went instead (``None``: nowhere). One line: ``out: cannot write X (why); the result was
    written to Y instead`` — the finished work is not lost."""

    def __init__(self, field: str, message: str, rescued: Path | None):
        super().__init__(field, message)
        self.rescued = rescued


def rescue_dirs() -> list[Path]:
    """Where :func:`save_or_rescue` puts a result it could not write: the temporary folder
    (``TMPDIR``), then the home folder."""
    return [Path(tempfile.gettempdir()), Path.home()]


def save_or_rescue(ds: xr.Dataset, path: str | os.PathLike, field: str = "out",
                   fallbacks: list[Path] | None = None) -> Path:
    """:func:`save`, and where the disk refuses (``OSError``: full, quota, I/O error) the same bytes
    into a new ``tdyn-rescue-*`` folder of the first of ``fallbacks`` (default :func:`rescue_dirs`)
    that takes them; then raise :class:`WriteFailed` saying where the result is (or that nowhere
    took it). ``path`` is left as it was."""
    path = Path(path)
    data = to_bytes(ds)
    try:
        return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
    except OSError as err:
        why = _why(err)
    tried = []
    for d in rescue_dirs() if fallbacks is None else fallbacks:
        tried.append(str(d))
        folder = None
        try:
            folder = Path(tempfile.mkdtemp(prefix="tdyn-rescue-", dir=d))
            target = atomic_write(folder / path.name, lambda tmp: Path(tmp).write_bytes(data))
        except (OSError, ConfigError):
            if folder is not None:
                try:
                    folder.rmdir()
                except OSError:
                    pass
            continue
        raise WriteFailed(field, f"cannot write {path} ({why}); the result was written to {target} instead",
                          target) from None
    raise WriteFailed(field, f"cannot write {path} ({why}); the result is lost: no room in {', '.join(tried)} "
                             "either (free some space and rerun)", None) from None


def load(path: str | os.PathLike) -> xr.Dataset:
    return xr.load_dataset(path, engine="h5netcdf")
