"""simulate/trajectory.py: NetCDF round trip with provenance, atomic writes (a failing writer, a
signal mid-write, the umask)."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import simulate
from helpers.signals import user_terminal
from helpers.systems import oscillator

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": "0"}


def test_netcdf_roundtrip_and_atomic_write(tmp_path):
    S = oscillator()
    tr = simulate.solve(S, {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, np.linspace(0, 1, 11), backend="scipy")
    path = tmp_path / "traj.nc"
    simulate.save(tr, path)
    back = simulate.load(path)
    assert np.array_equal(back.x.values, tr.x.values)
    assert simulate.parameter_values_of(back)["k"] == 0.3
    assert back.attrs["paper"] == "test" and "versions" in back.attrs
    # a failing writer leaves neither the target nor a temp file behind

    def bad_writer(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        simulate.atomic_write(tmp_path / "other.nc", bad_writer)
    assert sorted(os.listdir(tmp_path)) == ["traj.nc"]


# ------------------------------------------------------------------------------------------------
# atomic writes
# ------------------------------------------------------------------------------------------------
_SLOW_SAVE = textwrap.dedent("""
    import sys, time, pathlib
    from simulate.trajectory import atomic_write
    target, ready = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    def slow(tmp):
        with open(tmp, "w") as f:
            f.write("half a file"); f.flush()
            ready.write_text("writing")
            time.sleep(60)
    atomic_write(target, slow)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_during_save_leaves_target_intact_and_no_temp_file(tmp_path, sig):
    target, ready = tmp_path / "run.nc", tmp_path / "ready"
    target.write_text("the old complete file")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, str(target), str(ready)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=user_terminal)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()[1].decode()[-2000:]
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # the save is under way
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert target.read_text() == "the old complete file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready", "run.nc"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    ds = simulate.make_trajectory(np.arange(3.0), {"x": np.ones(3)}, paper="p", system="s", source="ode")
    target = tmp_path / "x.nc"
    target.write_text("old")
    os.chmod(target, 0o644)
    old = os.umask(umask)
    try:
        simulate.save(ds, target)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert float(simulate.load(target)["x"].sum()) == 3.0


def test_a_sigterm_the_process_was_started_with_ignored_stays_ignored():
    """``nohup`` / a background job: an ignored SIGTERM is left ignored by the atomic writers'
    handler (and the trainer's, tests/empirical/test_trainer.py); a default one becomes
    :class:`~simulate.trajectory.Terminated` inside the block and is restored after it."""
    from simulate.trajectory import Terminated, terminate_as_exception

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with terminate_as_exception():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: nothing happens
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with pytest.raises(Terminated), terminate_as_exception():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_equal_configs_with_different_literals_record_their_own_json():
    # SCBConfig(eta_V=1) == SCBConfig(eta_V=1.0), but each run's provenance is its own config:
    # the memo of the recorded JSON must not hand one the other's
    from simulate.trajectory import config_attrs, jsonable
    from theory.scb import SCBConfig

    a, b = SCBConfig(eta_V=1), SCBConfig(eta_V=1.0)
    assert a == b
    assert json.loads(config_attrs(a)["config"])["eta_V"] == 1
    assert isinstance(json.loads(config_attrs(b)["config"])["eta_V"], float)
    assert config_attrs(a)["config"] != config_attrs(b)["config"]
    assert config_attrs(SCBConfig(N=4))["config"] == json.dumps(jsonable(SCBConfig(N=4).to_dict()), sort_keys=True)
