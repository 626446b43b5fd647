"""Interrupt-safe training: a real SIGINT/SIGTERM to a real ``tdyn train`` keeps the
trajectory logged so far as ``FILE.partial.nc`` (up to the last logging step before the signal),
saves the checkpoint at the step reached, prints one line saying how to resume, and the resumed
run equals the uninterrupted one bit for bit. Checkpoint intervals: steps or seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from empirical.trainer import DEFAULT_CHECKPOINT_EVERY, parse_every
from helpers.signals import user_terminal
from theory.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": "0"}
RUN = ["train", "scb", "--device", "cpu", "--no-progress", "--set", "T=8", "--set", "batch=32",
       "--set", "steps=200000", "--set", "log_every=40"]
LOG_EVERY = 40


def _tdyn(*args):
    return subprocess.Popen([sys.executable, "-m", "figures", *args], env=ENV, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=user_terminal)


def _wait_for_step(meta: Path, proc, at_least: int) -> int:
    """The step recorded in checkpoint.json once it is >= ``at_least`` (steps done before the signal)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            step = json.loads(meta.read_text())["step"]
            if step >= at_least:
                return step
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint at step >= {at_least}: {proc.communicate(timeout=30)[1][-2000:]}")


def _same(a, b):
    assert sorted(a.data_vars) == sorted(b.data_vars)
    np.testing.assert_array_equal(a.time.values, b.time.values)
    for v in a.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def test_sigint_keeps_partial_and_resume_is_bit_identical(tmp_path):
    import simulate

    out, ck = tmp_path / "run.nc", tmp_path / "ck"
    proc = _tdyn(*RUN, "--out", str(out), "--checkpoint", str(ck), "--checkpoint-every", "100")
    before = _wait_for_step(ck / "checkpoint.json", proc, 300)  # >= 300 steps done before the signal
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    m = re.match(r"interrupted: stopped by Ctrl-C at step (\d+); trajectory to step (\d+) kept in (\S+); "
                 r"resume: (.+)$", lines[0])
    assert m, lines[0]
    stopped, kept = int(m.group(1)), int(m.group(2))
    assert stopped >= before
    assert kept == stopped // LOG_EVERY * LOG_EVERY  # the last logging step before the signal
    assert not out.exists() and Path(m.group(3)) == tmp_path / "run.partial.nc"
    partial = simulate.load(tmp_path / "run.partial.nc")
    assert partial.attrs["status"] == 1 and int(partial["step"].values[-1]) == kept
    np.testing.assert_array_equal(partial["step"].values, np.arange(0, kept + 1, LOG_EVERY))
    info = json.loads((ck / "checkpoint.json").read_text())
    assert info["step"] == stopped and info["last_logged_step"] == kept
    resume = m.group(4).split()
    assert resume[:3] == ["tdyn", "train", "scb"] and resume[-1] == "--resume"
    # the printed command resumes bit for bit (a shorter run, so that the resumed part is quick)
    short = [*RUN[:-4], "--set", "steps=3000", "--set", f"log_every={LOG_EVERY}"]
    out2, ck2 = tmp_path / "short.nc", tmp_path / "ck2"
    proc = _tdyn(*short, "--out", str(out2), "--checkpoint", str(ck2), "--checkpoint-every", "100")
    _wait_for_step(ck2 / "checkpoint.json", proc, 100)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the short run finished before the signal arrived (machine too fast)")
    assert proc.returncode == 130, err
    cmd = err.strip().split("resume: ")[1].split()
    done = _tdyn(*cmd[1:])
    _, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    from empirical import scb as escb
    from figures.papers import get

    ref, _ = escb.train(get("scb").make_config(["T=8", "batch=32", "steps=3000", f"log_every={LOG_EVERY}"]),
                        device="cpu")
    _same(ref, simulate.load(out2))


def _start_plain(args, env):
    """``tdyn train`` with its training bar on stderr; returns (process, stderr read so far) once
    steps are under way (the bar names ``scb/``)."""
    proc = subprocess.Popen([sys.executable, "-m", "figures", *args], cwd=ROOT,
                            env={**env, "TDYN_PROGRESS": "always"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=user_terminal)
    seen = b""
    while b"scb/" not in seen and proc.poll() is None:
        seen += os.read(proc.stderr.fileno(), 4096)
    return proc, seen


def test_plain_train_checkpoints_by_default_and_ctrl_c_resumes_bit_for_bit(tmp_path):
    """``tdyn train scb ... --out run.nc`` (no --checkpoint): Ctrl-C keeps run.partial.nc and the
    checkpoint in run.ckpt/, prints one line (no "error:") with a resume command; that command
    continues the run bit for bit and then removes the stale partial file and the checkpoint."""
    import shlex

    import simulate
    from empirical import scb as escb
    from figures.papers import get

    out = tmp_path / "run.nc"
    short = [a for a in RUN[:-4] if a != "--no-progress"] + ["--set", "steps=3000", "--set", f"log_every={LOG_EVERY}"]
    proc, seen = _start_plain([*short, "--out", str(out)], ENV)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = (seen + rest).decode(errors="replace")
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived (machine too fast)")
    assert proc.returncode == 130, err[-2000:]
    last = err.rstrip().split("\n")[-1].split("\r")[-1]  # the line after the (cleared) bar
    assert last.startswith("interrupted: stopped by Ctrl-C at step "), err[-2000:]
    assert "error" not in last and "not resumable" not in last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "run.partial.nc"]
    assert (tmp_path / "run.ckpt" / "checkpoint.pt").is_file()
    cmd = shlex.split(last.split("; resume: ")[1])
    assert cmd[:3] == ["tdyn", "train", "scb"] and cmd[-1] == "--resume" and "--checkpoint" not in cmd
    done = _tdyn(*cmd[1:])
    _, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nc"]  # partial and checkpoint: done with
    ref, _ = escb.train(get("scb").make_config(["T=8", "batch=32", "steps=3000", f"log_every={LOG_EVERY}"]),
                        device="cpu")
    _same(ref, simulate.load(out))


def test_sigterm_keeps_partial_and_the_default_checkpoint(tmp_path):
    import simulate

    out = tmp_path / "run.nc"
    proc, seen = _start_plain([a for a in RUN if a != "--no-progress"] + ["--out", str(out)], ENV)
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == 143, err[-2000:]
    last = err.rstrip().split("\n")[-1].split("\r")[-1]  # the line after the (cleared) bar
    assert last.startswith("error: interrupted: stopped by SIGTERM at step "), err[-2000:]
    assert last.endswith(f"--out {out} --resume") and "files written so far are complete" not in last
    assert "kept in" in last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "run.partial.nc"]
    partial = simulate.load(tmp_path / "run.partial.nc")
    assert partial.attrs["status"] == 1 and partial.sizes["time"] >= 1


def test_train_without_out_still_says_how_to_make_it_resumable(tmp_path):
    proc, seen = _start_plain([a for a in RUN if a != "--no-progress"], ENV)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == 130, err[-2000:]
    last = err.rstrip().split("\n")[-1].split("\r")[-1]
    assert last.startswith("interrupted: stopped by Ctrl-C at step ") and "--checkpoint DIR" in last, last


@pytest.mark.parametrize("value, expected", [
    (None, parse_every(DEFAULT_CHECKPOINT_EVERY)), ("60s", ("seconds", 60.0)), ("5m", ("seconds", 300.0)),
    ("1h", ("seconds", 3600.0)), (500, ("steps", 500.0)), ("500", ("steps", 500.0)), (0, ("log", 0.0)),
    ("0", ("log", 0.0)),
])
def test_checkpoint_interval_in_steps_or_seconds(value, expected):
    assert parse_every(value) == expected
    assert parse_every(None) == ("seconds", 60.0)


@pytest.mark.parametrize("bad", [-3, "-3", "1.5", "60x", "0s", "", True])
def test_bad_checkpoint_interval_is_a_config_error(bad):
    with pytest.raises(ConfigError) as err:
        parse_every(bad)
    assert err.value.field == "checkpoint_every"


def test_time_interval_checkpoints_save_less_often(tmp_path, monkeypatch):
    """With a time interval, a checkpoint is written when that much time has passed (a fake clock
    here: 1 s per step, interval 10 s -> steps 10, 20, 30, 40 and the last), not at every step;
    checkpoint.json records the step of each."""
    import empirical.trainer as tr
    from tiny.empirical.experiment import TinyExperiment as _Experiment
    from tiny.theory import TinyConfig

    clock = {"t": 0.0}
    monkeypatch.setattr(tr.time, "monotonic", lambda: clock["t"])
    saved = []
    orig = tr.atomic_write

    def write(path, fn):
        out = orig(path, fn)
        if str(path).endswith(".pt"):
            saved.append(json.loads((Path(path).parent / "checkpoint.json").read_text())["step"])
        return out

    monkeypatch.setattr(tr, "atomic_write", write)

    class Tick(_Experiment):  # one second per step
        def step(self, step):
            clock["t"] += 1.0
            return super().step(step)

    tr.Trainer(device="cpu", checkpoint=tmp_path / "ck", checkpoint_every="10s").run(
        Tick(TinyConfig(steps=45, log_every=5)))
    assert saved == [10, 20, 30, 40, 45]
    saved.clear()
    tr.Trainer(device="cpu", checkpoint=tmp_path / "ck2", checkpoint_every=0).run(Tick(TinyConfig(steps=45, log_every=5)))
    assert saved == list(range(5, 46, 5))  # 0: at every logging step
