"""The sweep runner: cells keyed by config + code, resume without recomputation, failed cells
recorded, a killed worker (local process or Ray node) leaves nothing lost or duplicated on rerun,
and ``tdyn sweep`` / ``figures.sweep.sweep`` on a real paper (SCB) give the same numbers as the
train slot run directly."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from empirical.sweeps import grid_cells, open_sweep, read_index, run_cells

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]  # holds helpers/
LINE = "helpers.sweep_cells:line"


@pytest.fixture(autouse=True)
def _importable_helpers(monkeypatch):
    """Spawned workers import the cell function from tests/helpers."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(TESTS)]))


def _cells(xs, **options):
    return grid_cells("toy", {"x": 0.0}, {"x": list(xs)}, options=options)


def _assert_complete(store, xs):
    """Every cell exactly once: one index row and one file per key, all ok, y = x t."""
    idx = read_index(store)
    assert sorted(idx["x"]) == sorted(xs) and idx["key"].is_unique and set(idx["status"]) == {"ok"}
    files = sorted(p.stem for p in (Path(store) / "cells").iterdir())
    assert files == sorted(idx["key"])
    ds = open_sweep(store)
    np.testing.assert_array_equal(ds["y"].values, np.outer(ds["x"].values, np.arange(5.0)))


def test_resume_skips_finished_cells_and_failures_do_not_stop_others(tmp_path):
    store, flag = tmp_path / "store", tmp_path / "flag"
    flag.mkdir()
    seen = []
    idx = run_cells(LINE, _cells([1.0, 2.0, 3.0], fail_once=str(flag)), store, progress=lambda *a: seen.append(a))
    assert dict(zip(idx["x"], idx["status"])) == {1.0: "ok", 2.0: "failed", 3.0: "ok"}
    assert "ValueError: x=2.0 is the failing cell" in idx.set_index("x").loc[2.0, "error"]
    assert len(list((store / "errors").iterdir())) == 1
    mtimes = {p.name: p.stat().st_mtime_ns for p in (store / "cells").iterdir()}
    # rerun with one more point: the finished cells are skipped (files untouched), the failed one
    # is retried, the new one runs — exactly two cells compute
    seen.clear()
    run_cells(LINE, _cells([1.0, 2.0, 3.0, 4.0], fail_once=str(flag)), store, progress=lambda *a: seen.append(a))
    assert [s for _, s, _ in seen] == ["ok", "ok"]
    assert all(mtimes[n] == (store / "cells" / n).stat().st_mtime_ns for n in mtimes)
    assert list((store / "errors").iterdir()) == []  # the retried cell's error is cleared
    _assert_complete(store, [1.0, 2.0, 3.0, 4.0])


def _kill_when_held(hold: Path, stop: threading.Event):
    while not stop.is_set():
        if (hold / "pid").exists() and (hold / "pid").read_text():
            time.sleep(0.2)
            os.kill(int((hold / "pid").read_text()), signal.SIGKILL)
            return
        time.sleep(0.05)


def _sweep_with_a_killed_worker(tmp_path, **where):
    hold = tmp_path / "hold"
    hold.mkdir()
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when_held, args=(hold, stop), daemon=True)
    killer.start()
    store = tmp_path / "store"
    try:
        idx = run_cells(LINE, _cells(xs, hold=str(hold)), store, **where)
    finally:
        stop.set()
        killer.join()
    assert (hold / "pid").exists()
    failed = idx[idx["status"] == "failed"]
    assert 2.0 in set(failed["x"])  # the killed cell is recorded, not lost
    rerun = {"workers": 1} if "workers" in where else where  # rerun (in-process locally): completes
    run_cells(LINE, _cells(xs, hold=str(hold)), store, **rerun)
    _assert_complete(store, xs)


def test_killed_local_worker_then_rerun_completes(tmp_path):
    _sweep_with_a_killed_worker(tmp_path, workers=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def ray_cluster(monkeypatch):
    """A real local cluster: a head without CPUs plus one worker node (1 CPU), in their own
    process groups (stopped by group id, never with a broad `ray stop`)."""
    pytest.importorskip("ray")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:
        pytest.skip("the ray command is not installed")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--block", "--disable-usage-stats"]
    procs = [subprocess.Popen([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                               "--num-cpus=0", "--include-dashboard=false", *common], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen([ray_bin, "start", f"--address=127.0.0.1:{port}", "--num-cpus=1", *common],
                                      env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        import ray

        for _ in range(120):
            try:
                if not ray.is_initialized():
                    ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
                if ray.cluster_resources().get("CPU", 0) >= 1:
                    break
            except Exception:  # noqa: BLE001 - still starting
                pass
            time.sleep(0.5)
        else:
            pytest.skip("the local ray cluster did not start")
        yield f"127.0.0.1:{port}"
    finally:
        try:
            import ray

            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
        for p in reversed(procs):  # each node's whole process group (raylet, gcs, workers)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)


def test_ray_cluster_sweep_with_a_killed_worker(tmp_path, ray_cluster):
    _sweep_with_a_killed_worker(tmp_path, ray=ray_cluster)


def test_unreachable_ray_address_is_refused_before_anything_is_written(tmp_path):
    """A Ray address with nothing listening (a port just closed) fails in seconds with one line, exit 2,
    no store; a malformed address likewise (ray.init itself retries for minutes)."""
    from figures.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["sweep", "scb", "--grid", "eta_V=0.02,0.05", "--store", str(tmp_path / "st"),
                                    "--ray", f"127.0.0.1:{port}"])
    assert res.exit_code == 2 and res.stderr.startswith(f"error: ray: cannot reach 127.0.0.1:{port}"), res.output
    assert len(res.stderr.strip().splitlines()) == 1 and time.monotonic() - t0 < 60
    assert not (tmp_path / "st").exists()
    res = CliRunner().invoke(main, ["figures", "scb", "--outdir", str(tmp_path / "figs"), "--ray", f"127.0.0.1:{port}"])
    assert res.exit_code == 2 and res.stderr.startswith("error: ray: cannot reach"), res.output
    assert not (tmp_path / "figs").exists()
    with pytest.raises(Exception, match="ray: 'head-node' is not"):
        run_cells(LINE, _cells([1.0]), tmp_path / "st2", ray="head-node")
    assert not (tmp_path / "st2").exists()


def test_a_stopped_pool_worker_finishes_its_partial_file_under_further_signals_and_starts_no_queued_cell(tmp_path):
    """A pool worker whose cell a signal stopped keeps that cell's partial trajectory, then ignores
    the parent's further SIGTERMs (one arriving during the h5py write used to abort it and print
    h5py's cleanup errors on the sweep's stderr) and refuses the cells still queued for it (they
    stay pending). Run in a child process: the worker's signal dispositions change for good."""
    script = f"""
import os, signal, sys
from pathlib import Path
from empirical.sweeps import _run_cell, grid_cells, partial_path
store = Path(sys.argv[1])
(store / "cells").mkdir(parents=True)
first, queued = grid_cells("toy", {{"x": 0.0}}, {{"x": [1.0, 2.0]}})
try:
    _run_cell("helpers.sweep_cells:stopped", first, str(store), True)
except KeyboardInterrupt:
    pass
os.kill(os.getpid(), signal.SIGTERM)  # ignored now: the process is still here
try:
    _run_cell("helpers.sweep_cells:line", queued, str(store), True)
    print("queued cell ran")
except KeyboardInterrupt:
    print("queued cell refused")
print(partial_path(store, first.key).is_file(), sorted(p.name for p in (store / "cells").iterdir()) == [partial_path(store, first.key).name])
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "S")], capture_output=True, text=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.split() == ["queued", "cell", "refused", "True", "True"], out.stdout
    import xarray as xr

    from empirical.sweeps import partial_path

    first = _cells([1.0])[0]
    kept = xr.load_dataset(partial_path(tmp_path / "S", first.key), engine="h5netcdf")
    np.testing.assert_array_equal(kept["y"].values, [0.0, 1.0, 2.0])


def test_a_stopped_cell_outside_a_pool_leaves_the_signal_handlers_alone(tmp_path):
    """Serial sweeps (and notebooks) run cells in the caller's process: a stopped cell keeps its
    partial file there too, but the caller's Ctrl-C/SIGTERM handling is not touched."""
    from empirical.sweeps import _run_cell, partial_path

    (tmp_path / "cells").mkdir()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    cell = _cells([1.0])[0]
    with pytest.raises(KeyboardInterrupt):
        _run_cell("helpers.sweep_cells:stopped", cell, str(tmp_path))
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert partial_path(tmp_path, cell.key).is_file()
    assert _run_cell(LINE, _cells([2.0])[0], str(tmp_path))[1] == "ok"  # the next cell runs


@pytest.mark.parametrize("workers", [1, 2])
def test_runtime_keywords_reach_every_cell_and_are_not_part_of_its_key(tmp_path, workers):
    """run_cells(runtime=...): every call of the cell function gets them (in this process and in
    spawned workers); the store's cells are the same cells whatever they are, so a rerun with other
    runtime keywords recomputes nothing."""
    notes = tmp_path / "notes"
    notes.mkdir()
    cells = _cells([1.0, 2.0, 3.0])
    idx = run_cells("helpers.sweep_cells:noted", cells, tmp_path / "S", workers=workers,
                    runtime={"note": "hello", "folder": str(notes)})
    assert list(idx["status"]) == ["ok"] * 3
    written = {p.name: p.read_text().split() for p in notes.iterdir()}
    assert sorted(written) == ["1.0.txt", "2.0.txt", "3.0.txt"] and {w[0] for w in written.values()} == {"hello"}
    pids = {w[1] for w in written.values()}
    assert (pids == {str(os.getpid())}) == (workers == 1)
    for p in notes.iterdir():
        p.unlink()
    again = run_cells("helpers.sweep_cells:noted", cells, tmp_path / "S", workers=workers,
                      runtime={"note": "other", "folder": str(notes)})
    assert list(again["status"]) == ["ok"] * 3 and not any(notes.iterdir())  # nothing recomputed
    assert list(again["key"]) == [c.key for c in _cells([1.0, 2.0, 3.0])]
