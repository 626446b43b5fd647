"""The Trainer's checkpoints (empirical/trainer.py): fingerprints, and interrupted-then-resumed ==
uninterrupted, bit for bit — for SCB through ``tdyn train`` with a real SIGINT, and for every paper
whose ``train`` slot takes checkpoints (table-driven: a paper joins as soon as its slot passes them
to the Trainer). Atomic writes under signals: tests/simulate/test_trajectory.py."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from figures.papers import PAPERS
from helpers.signals import user_terminal
from helpers.trajectories import assert_same

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": "0"}

#: tiny configs per paper (``--set`` strings) for the resume tests
TINY = {
    "scb": ["T=8", "steps=40", "batch=32", "log_every=5"],
    "topic": ["T=3", "v=3", "N=20", "batch=8", "steps=20", "log_every=5"],
    "scan-snap": ["num_common=2", "num_unique_per_next=2", "T=16", "batch=8", "steps=20", "log_every=5"],
    "joma": ["steps=40", "log_every=10"],
}


def _takes_checkpoint(row) -> bool:
    return "checkpoint" in inspect.signature(row.slot("train")).parameters


# ------------------------------------------------------------------------------------------------
# Trainer checkpoints, table-driven
# ------------------------------------------------------------------------------------------------
def _interrupt_after_checkpoints(monkeypatch, n: int):
    """Make the n-th checkpoint save raise KeyboardInterrupt right after it completed."""
    import empirical.trainer as tr

    orig, count = tr.atomic_write, {"n": 0}

    def write(path, fn):
        out = orig(path, fn)
        if str(path).endswith(".pt"):
            count["n"] += 1
            if count["n"] == n:
                raise KeyboardInterrupt
        return out

    monkeypatch.setattr(tr, "atomic_write", write)
    return lambda: monkeypatch.setattr(tr, "atomic_write", orig)


@pytest.mark.parametrize("paper", list(PAPERS))
def test_interrupted_then_resumed_equals_uninterrupted(paper, tmp_path, monkeypatch):
    row = PAPERS[paper]
    if not _takes_checkpoint(row):
        pytest.skip(f"{paper}'s train slot does not pass checkpoints to the Trainer yet")
    cfg = row.make_config(TINY.get(paper, []))
    train = row.slot("train")
    ref = train(cfg, device="cpu")
    restore = _interrupt_after_checkpoints(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, device="cpu", checkpoint=tmp_path / "ck", checkpoint_every=5)
    restore()
    got = train(cfg, device="cpu", checkpoint=tmp_path / "ck", checkpoint_every=5, resume=True)
    assert_same(ref, got)
    assert json.loads(got.attrs["config"]) == json.loads(json.dumps(cfg.to_dict()))


def test_trainer_resume_bit_identical_and_refuses_another_config(tmp_path, monkeypatch):
    """Through the Trainer directly (SCB's experiment): resume equals the uninterrupted run; a
    changed eta_V or N is ``ConfigError('resume')`` before any state is loaded."""
    from empirical import scb as escb
    from theory.errors import ConfigError
    from theory.scb import SCBConfig

    cfg = SCBConfig(T=8, steps=40, batch=32, log_every=5)
    ref, _ = escb.train(cfg, device="cpu")
    restore = _interrupt_after_checkpoints(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        escb.train(cfg, device="cpu", checkpoint=tmp_path, checkpoint_every=10)
    restore()
    fp = json.loads((tmp_path / "checkpoint.json").read_text())
    assert fp["config"]["eta_V"] == 0.05 and fp["steps"] == 40 and len(fp["code_version"]) == 16
    got, _ = escb.train(cfg, device="cpu", checkpoint=tmp_path, checkpoint_every=10, resume=True)
    assert_same(ref, got)
    for change, word in ((dict(eta_V=0.1), "eta_V 0.05 -> 0.1"), (dict(N=4), "N 3 -> 4"), (dict(steps=60), "steps")):
        with pytest.raises(ConfigError, match=word) as err:
            escb.train(dataclasses.replace(cfg, **change), device="cpu", checkpoint=tmp_path, resume=True)
        assert err.value.field == "resume"


# ------------------------------------------------------------------------------------------------
# tdyn train scb --checkpoint: a real SIGINT, then --resume
# ------------------------------------------------------------------------------------------------
_SHIM = textwrap.dedent("""
    import dataclasses, inspect, sys
    from figures import papers
    row = papers.PAPERS["scb"]
    if "checkpoint" not in inspect.signature(row.slot("train")).parameters:
        def run(config, *, device="auto", variant=None, progress=False, checkpoint=None,
                checkpoint_every=0, resume=False):
            from empirical.scb import train
            return train(config, variant=variant or "preconditioned", device=device, progress=progress,
                         checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)[0]
        papers.register(dataclasses.replace(row, train=run), replace=True)
    from figures.cli import main
    main(sys.argv[1:], prog_name="tdyn")
""")
SCB_RUN = ["--device", "cpu", "--no-progress", "--set", "T=8", "--set", "batch=32", "--set", "steps=800",
           "--set", "log_every=50"]


def _tdyn(*args, **kw):
    return subprocess.Popen([sys.executable, "-c", _SHIM, *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=user_terminal, **kw)


def _scb_row_with_checkpoints():
    """The scb row, or (until empirical.scb.run passes them on) one whose train slot does."""
    row = PAPERS["scb"]
    if _takes_checkpoint(row):
        return row
    ns: dict = {}
    exec(_SHIM.split("from figures.cli import main")[0].replace("papers.register(", "new = (").replace(", replace=True)", ")"), ns)
    return ns["new"]


def test_tdyn_train_scb_sigint_then_resume_equals_uninterrupted(tmp_path, monkeypatch):
    import simulate
    from empirical import scb as escb
    from figures.cli import main

    ck = tmp_path / "ck"
    proc = _tdyn("train", "scb", *SCB_RUN, "--checkpoint", str(ck), "--checkpoint-every", "50")
    deadline = time.monotonic() + 120
    while not (ck / "checkpoint.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err  # interrupted mid-run, not finished
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: stopped by Ctrl-C at step "), err
    assert lines[0].endswith(f"--checkpoint {ck} --checkpoint-every 50 --resume"), err
    import torch

    stopped_at = torch.load(ck / "checkpoint.pt", weights_only=False)["step"]
    assert 50 <= stopped_at < 800
    assert json.loads((ck / "checkpoint.json").read_text())["step"] == stopped_at  # saved where it stopped
    # a changed eta_V is refused before training, exit 2
    monkeypatch.setitem(PAPERS, "scb", _scb_row_with_checkpoints())
    bad = CliRunner().invoke(main, ["train", "scb", *SCB_RUN, "--set", "eta_V=0.1", "--checkpoint", str(ck), "--resume"])
    assert bad.exit_code == 2
    assert bad.stderr.strip().startswith("error: resume: checkpoint was written by a different run: eta_V"), bad.stderr
    out = tmp_path / "resumed.nc"
    done = _tdyn("train", "scb", *SCB_RUN, "--checkpoint", str(ck), "--resume", "--out", str(out))
    _, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    cfg = PAPERS["scb"].make_config(["T=8", "batch=32", "steps=800", "log_every=50"])
    ref, _ = escb.train(cfg, device="cpu")
    assert_same(ref, simulate.load(out))
