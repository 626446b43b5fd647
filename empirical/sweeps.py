"""The sweep runner: grids of training runs (or solves) on local processes or a Ray cluster, with a
result store that makes an interrupted sweep resumable.

A **cell** is one run: a paper, a full config (a dict of every field), and a ``job`` (what the
cell runs: ``train``, ``ode`` or ``text`` from ``tdyn sweep --kind``, or a protocol's own job such
as ``fig6``). A cell's **key** is a hash of ``(paper, job, options, config, code version)``: the
same cell on the same code is computed once. The store (a folder) holds

* ``cells/<key>.nc`` — the cell's trajectory (NetCDF, written atomically by the worker);
* ``errors/<key>.json`` — a failed cell's error (type, message); retried on the next run;
* ``locks/<key>.lock`` — held while a cell computes, so that two sweeps on one store compute it once;
* ``index.csv`` — one row per cell of the sweep: key, status (``ok``/``failed``), error, the swept
  values, file; written by the driver only (atomically), so concurrent workers never race on it.

Finished cells are skipped on rerun. A cell counts as finished only when its file opens, every
variable in it reads back and its ``sweep_key`` attribute is the cell's key (:func:`cell_problem`):
a damaged file (truncated, overwritten, another cell's) is removed and the cell recomputed, with a
:class:`~theory.errors.TdynWarning` naming it. A failing cell — an exception, or a
worker process that died — is recorded and does not stop the others. :func:`open_sweep` reads the
index and the cells as one ``xarray.Dataset`` with a ``cell`` dimension (swept values as coords).

Cells run a function given as ``"module:function"`` (importable in every worker), called as
``fn(paper, config: dict, **options) -> xarray.Dataset``; ``figures.sweep`` provides the paper
table's ``train``/``problem`` slots as such functions. Local parallelism uses processes
(``spawn``: torch and jax are not fork-safe); ``ray`` (from the checkout: ``pip install -e ".[cluster]"``) runs the same
cells on a cluster.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import signal
import socket
import threading
import traceback
import warnings
from contextlib import contextmanager
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simulate.trajectory import jsonable, atomic_write, code_version
from theory.errors import ConfigError, TdynError, TdynWarning
from theory.refs import resolve_ref

__all__ = ["Cell", "grid_cells", "run_cells", "check_ray_address", "open_sweep", "read_index", "load_cells",
           "partial_path", "CellsFailed", "cell_problem", "check_store"]


@dataclass(frozen=True)
class Cell:
    """One run of a sweep. ``swept`` holds the values that vary across the sweep (for the index)."""

    paper: str
    config: Mapping[str, Any]
    job: str = "train"
    options: Mapping[str, Any] = field(default_factory=dict)
    swept: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        doc = {"paper": self.paper, "job": self.job, "options": jsonable(dict(self.options)),
               "config": jsonable(dict(self.config)), "code": code_version()}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def grid_cells(paper: str, base: Mapping[str, Any], grid: Mapping[str, Sequence[Any]], *, seeds: int = 0,
               seed_field: str = "seed", job: str = "train", options: Mapping[str, Any] | None = None) -> list[Cell]:
    """The product of ``grid`` (field -> values) over ``base`` (a full config dict); with
    ``seeds > 0`` each point is repeated for ``seed_field = 0 .. seeds-1``."""
    names = list(grid)
    axes = [list(grid[n]) for n in names]
    if seeds:
        names.append(seed_field)
        axes.append(list(range(seeds)))
    cells = []
    for combo in itertools.product(*axes):
        swept = dict(zip(names, combo))
        cells.append(Cell(paper, {**base, **swept}, job, dict(options or {}), swept))
    return cells


@contextmanager
def _cell_lock(root: Path, key: str):
    """Hold ``root/locks/<key>.lock`` (``flock``, blocking) inside the block: two sweeps on one store
    never compute the same cell at once — the second waits, then finds the cell finished. Where
    ``fcntl`` or the lock file is unavailable (Windows, a read-only store) nothing is locked."""
    try:
        import fcntl

        (root / "locks").mkdir(parents=True, exist_ok=True)
        fh = open(root / "locks" / f"{key}.lock", "a")
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fh.close()  # releases the lock


def _run_cell(fn_ref: str, cell: Cell, store: str, pool_worker: bool = False,
              runtime: Mapping[str, Any] | None = None) -> tuple[str, str, str]:
    """Worker side: run one cell, write its file or its error; never raises for a cell's failure.
    Under the cell's lock; a cell another sweep finished meanwhile is not recomputed.

    ``pool_worker``: this is a process of the sweep's own pool, stopped by its parent with SIGTERM
    (then SIGKILL after a grace). Once a signal has stopped one of its cells, the process writes that
    cell's partial trajectory with further SIGINT/SIGTERM ignored (a second SIGTERM would otherwise
    abort the write inside h5py, whose cleanup then prints to the sweep's stderr) and starts none of
    the cells still queued for it (they stay pending)."""
    if pool_worker and _POOL_WORKER_STOPPING.is_set():
        raise KeyboardInterrupt("the sweep is stopping: this worker starts no further cell")
    key, root = cell.key, Path(store)
    with _cell_lock(root, key):
        if cell_problem(root / "cells" / f"{key}.nc", key) is None:
            return key, "ok", ""
        return _compute_cell(fn_ref, cell, root, pool_worker, runtime)


#: set in a pool worker process once a signal stopped one of its cells (:func:`_run_cell`)
_POOL_WORKER_STOPPING = threading.Event()


def _compute_cell(fn_ref: str, cell: Cell, root: Path, pool_worker: bool = False,
                  runtime: Mapping[str, Any] | None = None) -> tuple[str, str, str]:
    key = cell.key
    try:
        ds = resolve_ref(fn_ref)(cell.paper, dict(cell.config), **dict(cell.options), **dict(runtime or {}))
        ds.attrs["sweep_key"] = key
        ds.attrs["sweep_cell"] = json.dumps(jsonable(dict(cell.swept)), sort_keys=True)
        atomic_write(root / "cells" / f"{key}.nc", lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"))
        for stale in (root / "errors" / f"{key}.json", partial_path(root, key)):
            if stale.exists():
                stale.unlink()
        return key, "ok", ""
    except KeyboardInterrupt as stop:  # a signal (the Trainer's carries the run's partial trajectory)
        if pool_worker:  # the parent is stopping this process: finish the partial file undisturbed
            _POOL_WORKER_STOPPING.set()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
        _keep_partial(root, key, getattr(stop, "partial", None))
        raise
    except Exception as exc:  # noqa: BLE001 - a failing cell is recorded, not fatal
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        _write_error(root, key, message, traceback.format_exc())
        return key, "failed", message


def partial_path(root: Path, key: str) -> Path:
    """Where an interrupted cell keeps what it logged before the signal (never a finished cell:
    a rerun computes the cell again and removes it)."""
    return Path(root) / "cells" / f"{key}.partial.nc"


def _keep_partial(root: Path, key: str, partial) -> None:
    """Write an interrupted run's partial trajectory (one logged time point at least) to
    :func:`partial_path`; a failure to write must not hide the interrupt, so it is only skipped."""
    if partial is None or not hasattr(partial, "to_netcdf") or partial.sizes.get("time", 0) < 1:
        return
    partial = partial.copy()
    partial.attrs["sweep_partial_of"] = key  # not ``sweep_key``: never taken for the finished cell
    try:
        atomic_write(partial_path(root, key), lambda tmp: partial.to_netcdf(tmp, engine="h5netcdf"))
    except Exception:  # noqa: BLE001 - the interrupt is what the caller must see
        pass


def _write_error(root: Path, key: str, message: str, trace: str = "") -> None:
    (root / "errors").mkdir(parents=True, exist_ok=True)
    atomic_write(root / "errors" / f"{key}.json",
                 lambda tmp: Path(tmp).write_text(json.dumps({"error": message, "traceback": trace})))


def cell_problem(path: str | Path, key: str) -> str | None:
    """Why the file ``path`` is not the finished cell ``key`` (``None`` when it is): it must be a
    file that opens as HDF5/NetCDF, whose every variable reads back, and whose ``sweep_key``
    attribute is ``key``. The one validity check of the store (rerun, :func:`load_cells`,
    :func:`open_sweep`)."""
    import h5py

    path = Path(path)
    if not path.is_file():
        return "missing" if not path.exists() else "not a file"
    try:
        with h5py.File(path, "r") as f:
            stored = f.attrs.get("sweep_key")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored != key:
                return f"its key is {stored!r}, not {key!r}"
            datasets = []
            f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
            for d in datasets:
                d[()]  # reading every chunk finds a truncated or corrupted payload
    except Exception as exc:  # noqa: BLE001 - any reader failure means a damaged cell
        return "unreadable: " + " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    return None


def check_store(store: str | Path, field: str = "store") -> Path:
    """``store`` as a usable result folder: it, ``cells/`` and ``errors/`` are folders where they
    exist and ``index.csv`` is not a folder; else ``ConfigError(field, ...)``. Creates nothing."""
    root = Path(store)
    if root.exists() and not root.is_dir():
        raise ConfigError(field, f"not a directory: {root}")
    for sub in ("cells", "errors"):
        if (root / sub).exists() and not (root / sub).is_dir():
            raise ConfigError(field, f"{root / sub} is a file, not the store's {sub} folder (move it away)")
    if (root / "index.csv").is_dir():
        raise ConfigError(field, f"{root / 'index.csv'} is a folder, not the store's index (move it away)")
    return root


def _finished(root: Path, cell: Cell) -> bool:
    """Whether ``cell`` is finished in ``root`` (:func:`cell_problem`); a damaged file is removed
    with a :class:`~theory.errors.TdynWarning` so the cell is recomputed."""
    path = root / "cells" / f"{cell.key}.nc"
    if not path.exists():
        return False
    why = cell_problem(path, cell.key)
    if why is None:
        return True
    warnings.warn(TdynWarning("store", f"cell {path} is damaged ({why}); recomputing it"), stacklevel=3)
    try:
        path.unlink()
    except OSError as exc:
        raise ConfigError("store", f"cannot remove the damaged cell {path}: {exc.strerror}") from None
    return False


def _write_index(root: Path, cells: Sequence[Cell], status: Mapping[str, tuple[str, str]]) -> pd.DataFrame:
    rows = []
    for c in cells:
        st, err = status.get(c.key, ("pending", ""))
        rows.append({"key": c.key, "paper": c.paper, "job": c.job, "status": st, "error": err,
                     "file": f"cells/{c.key}.nc" if st == "ok" else "", **{k: jsonable(v) for k, v in c.swept.items()}})
    df = pd.DataFrame(rows)
    atomic_write(root / "index.csv", lambda tmp: df.to_csv(tmp, index=False))
    return df


def run_cells(fn_ref: str, cells: Sequence[Cell], store: str | Path, *, workers: int = 1, ray: str | None = None,
              progress: Callable[[str, str, str], None] | None = None,
              runtime: Mapping[str, Any] | None = None, bar: Callable[[int, str], Any] | None = None) -> pd.DataFrame:
    """Run every cell not already in ``store``; return the index (one row per cell).
    ``workers=1`` runs in this process; ``workers>1`` in that many spawned processes; ``ray`` (an
    address or ``"auto"``) on a Ray cluster. ``progress(key, status, error)`` is called per cell.
    ``runtime``: keywords every call of the cell function gets besides the cell's options, which
    are not part of the cell's key — how a run is shown, never its numbers (e.g. a progress bar);
    picklable. ``bar``: a bar factory ``(total, desc) -> tqdm-like`` (``update``,
    ``set_postfix_str``, ``close``) driven over the cells it runs (``figures.progress.cell_bar``;
    None: no bar).
    A Ray address that does not answer is refused before anything is written (:func:`check_ray_address`)."""
    if ray is not None:
        check_ray_address(ray)
    root = check_store(store)
    (root / "cells").mkdir(parents=True, exist_ok=True)
    unique = list({c.key: c for c in cells}.values())  # a cell given twice runs once
    status: dict[str, tuple[str, str]] = {}
    todo = []
    for c in unique:
        if _finished(root, c):
            status[c.key] = ("ok", "")
        else:
            todo.append(c)
    _write_index(root, unique, status)
    factory, bar = bar, None
    if factory is not None and todo:
        bar = factory(len(todo), f"{root.name}: {len(todo)} cells to run")
    swept = {c.key: ", ".join(f"{k}={v}" for k, v in c.swept.items()) or c.key[:10] for c in todo}

    def done(key, st, err):
        status[key] = (st, err)
        _write_index(root, unique, status)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{swept.get(key, key[:10])} {st}")
        if progress is not None:
            progress(key, st, err)

    try:
        _run_todo(fn_ref, todo, root, workers, ray, done, runtime)
    except BaseException:  # an interrupt: the index says which cells did finish before it
        for c in todo:
            if c.key not in status and cell_problem(root / "cells" / f"{c.key}.nc", c.key) is None:
                status[c.key] = ("ok", "")
            elif c.key not in status and partial_path(root, c.key).is_file():
                status[c.key] = ("interrupted", f"stopped by a signal; its partial trajectory is "
                                                f"cells/{c.key}.partial.nc; a rerun computes the cell")
        _write_index(root, unique, status)
        raise
    finally:
        if bar is not None:
            bar.close()
    return _write_index(root, unique, status)


def _run_todo(fn_ref, todo, root, workers, ray, done, runtime=None):
    if ray is not None:
        _run_ray(fn_ref, todo, root, ray, done, runtime)
    elif workers <= 1:
        for c in todo:
            done(*_run_cell(fn_ref, c, str(root), False, runtime))
    else:
        import multiprocessing as mp
        from concurrent.futures.process import BrokenProcessPool

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
        try:
            futs = {pool.submit(_run_cell, fn_ref, c, str(root), True, runtime): c for c in todo}
            for fut in as_completed(futs):
                c = futs[fut]
                try:
                    done(*fut.result())
                except BrokenProcessPool as exc:  # a worker died: the cell is recorded, rerun retries it
                    msg = f"worker process died: {exc}"
                    _write_error(root, c.key, msg)
                    done(c.key, "failed", msg)
        except BaseException:
            _stop_pool(pool)  # an interrupt: no queued cell starts, the running ones stop now
            raise
        pool.shutdown(wait=True)


def _stop_pool(pool, grace: float = 5.0) -> None:
    """Cancel the queued cells and stop the workers: SIGTERM (a training cell stops at the end of
    its step), then SIGKILL after ``grace`` seconds; returns once they are gone."""
    import time

    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=1.0)


def ray_cluster_file() -> Path:
    """Where ``ray start`` records the running cluster's address (what ``--ray auto`` resolves to):
    ``$RAY_TMPDIR/ray/ray_current_cluster``, by default under ``/tmp`` (as Ray reads it)."""
    import os

    return Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"

#: the HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and its client
#: server) answers with a SETTINGS frame (type 4) at once; anything else is not Ray
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_ray_address(address: str, timeout: float = 5.0) -> None:
    """Refuse a Ray address that cannot work, within ``timeout`` seconds instead of ``ray.init``'s
    minutes of retries: ``HOST:PORT`` or ``ray://HOST:PORT`` must accept a TCP connection and answer
    as a gRPC server does (an HTTP/2 SETTINGS frame: Ray's GCS and client server do; a web server or
    a silent port do not); ``"auto"`` must resolve (``RAY_ADDRESS``, else the cluster file ``ray
    start`` writes, :func:`ray_cluster_file`) to such an address where it resolves at all;
    ``"local"`` passes (a new local instance). Raises
    :class:`ConfigError` (field ``ray``)."""
    if address == "local":
        return
    if address == "auto":
        import os

        resolved, source = os.environ.get("RAY_ADDRESS", "").strip(), "RAY_ADDRESS"
        if not resolved or resolved == "auto":
            source = str(ray_cluster_file())
            try:
                resolved = ray_cluster_file().read_text().strip()
            except OSError:  # no cluster file: ray looks for a local GCS itself and fails fast
                return
        try:
            check_ray_address(resolved, timeout)
        except ConfigError as err:
            raise ConfigError("ray", f"--ray auto resolves to {resolved} (from {source}): {err.message}") from None
        return
    m = re.fullmatch(r"(?:ray://)?\[?([^\[\]\s]+?)\]?:(\d{1,5})", address)
    if m is None:
        raise ConfigError("ray", f"{address!r} is not 'auto', 'local', HOST:PORT or ray://HOST:PORT")
    host, port = m.group(1), int(m.group(2))
    hint = "start the head node (`ray start --head`) or pass --ray auto"
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_H2_HELLO)
            head = conn.recv(9)
    except (socket.timeout, TimeoutError):
        raise ConfigError("ray", f"{address} accepts connections but does not answer as Ray does within "
                                 f"{timeout:g} s (is it a Ray head node?); {hint}") from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError("ray", f"cannot reach {address} ({why}) within {timeout:g} s; {hint}") from None
    if len(head) < 9 or head[3] != 0x04:
        seen = head[:16].decode("ascii", "replace").split("\r")[0] if head else "nothing, then closed"
        raise ConfigError("ray", f"{address} is not a Ray server (it answered {seen!r}, not gRPC); {hint}")


def _run_ray(fn_ref: str, todo: Sequence[Cell], root: Path, address: str, done, runtime=None) -> None:
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the extra
        from theory.errors import ConfigError

        raise ConfigError("ray", "ray is not installed (from the checkout: pip install -e \".[cluster]\")") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except Exception as exc:  # noqa: BLE001 - ray raises ConnectionError, RuntimeError, ValueError, ...
            raise ConfigError("ray", f"cannot connect to {address}: "
                                     f"{' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]}") from None
    remote = ray.remote(num_cpus=1, max_retries=0)(_run_cell)
    refs = {remote.remote(fn_ref, c, str(root), False, runtime): c for c in todo}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        c = refs[ready[0]]
        try:
            done(*ray.get(ready[0]))
        except Exception as exc:  # noqa: BLE001 - e.g. the worker node died
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            _write_error(root, c.key, msg)
            done(c.key, "failed", msg)


def read_index(store: str | Path) -> pd.DataFrame:
    return pd.read_csv(Path(store) / "index.csv", keep_default_na=False)


def open_sweep(store: str | Path):
    """The finished cells of a sweep as one Dataset: dim ``cell`` (coords: key and swept values),
    time grids aligned by value (NaN where a cell has no such time)."""
    import xarray as xr

    root = Path(store)
    idx = read_index(root)
    ok = idx[idx["status"] == "ok"].reset_index(drop=True)
    if ok.empty:
        return xr.Dataset()
    for key, f in zip(ok["key"], ok["file"]):
        why = cell_problem(root / f, str(key))
        if why is not None:
            raise ConfigError("store", f"cell {root / f} is damaged ({why}); rerun the sweep to recompute it")
    dss = [xr.load_dataset(root / f, engine="h5netcdf") for f in ok["file"]]
    ds = xr.concat(dss, dim="cell", join="outer", combine_attrs="drop_conflicts", data_vars="all",
                   coords="different", compat="equals")
    skip = {"paper", "job", "status", "error", "file"}
    coords = {c: ("cell", ok[c].to_numpy()) for c in ok.columns if c not in skip}
    return ds.assign_coords(coords)


class CellsFailed(TdynError, RuntimeError):
    """Some cells of a sweep failed (the others are in the store). One line:
    ``sweep: k of n cell(s) failed (first: <error>); see <store>/index.csv; rerun to retry them``."""

    field = "sweep"

    def __init__(self, store: str | Path, index: pd.DataFrame):
        bad = index[index["status"] != "ok"]
        self.store, self.failed = str(store), bad
        first = str(bad["error"].iloc[0]) if len(bad) else ""
        super().__init__(f"sweep: {len(bad)} of {len(index)} cell(s) failed (first: {first[:300]}); "
                         f"see {Path(store) / 'index.csv'}; rerun to retry them")


def load_cells(store: str | Path, cells: Sequence[Cell]) -> list:
    """The finished cells' Datasets, loaded into memory, in the order of ``cells``; raises
    :class:`CellsFailed` (naming the first error) when any of them is missing from ``store``."""
    import xarray as xr

    root = Path(store)
    files = [root / "cells" / f"{c.key}.nc" for c in cells]
    if any(cell_problem(f, c.key) is not None for f, c in zip(files, cells)):
        raise CellsFailed(root, read_index(root))
    return [xr.load_dataset(f, engine="h5netcdf") for f in files]
