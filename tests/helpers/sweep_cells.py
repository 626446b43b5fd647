"""Cell functions for tests/empirical/test_sweeps.py (importable by spawned and Ray workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from simulate.trajectory import make_trajectory


def line(paper: str, config: dict, *, hold: str | None = None, fail_once: str | None = None):
    """``y = x * t`` on t = 0..4. With ``fail_once`` (a folder) the cell ``x == 2`` raises the first
    time; with ``hold`` (a folder) it first writes its pid to ``hold/pid`` and waits (to be
    killed) — once."""
    x = float(config["x"])
    if fail_once is not None and x == 2.0 and not (Path(fail_once) / "failed").exists():
        (Path(fail_once) / "failed").write_text("1")
        raise ValueError(f"x={x} is the failing cell")
    if hold is not None and x == 2.0:
        marker = Path(hold) / "pid"
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(120)
    t = np.arange(5.0)
    return make_trajectory(t, {"y": x * t}, paper=paper, system="line", source="test", config=config)


def stopped(paper: str, config: dict):
    """A cell stopped by a signal, as the Trainer stops one: a ``KeyboardInterrupt`` carrying the
    trajectory logged so far (``y = x * t`` on t = 0..2) as ``partial``."""
    x = float(config["x"])
    t = np.arange(3.0)
    stop = KeyboardInterrupt("stopped by SIGTERM")
    stop.partial = make_trajectory(t, {"y": x * t}, paper=paper, system="line", source="test", config=config)
    raise stop


def noted(paper: str, config: dict, *, note: str | None = None, folder: str | None = None):
    """``line`` that also writes ``note`` and its process id to ``folder/<x>.txt`` (the sweep's
    ``runtime`` keywords reach it)."""
    if folder is not None:
        (Path(folder) / f"{float(config['x'])}.txt").write_text(f"{note} {os.getpid()}")
    return line(paper, config)
